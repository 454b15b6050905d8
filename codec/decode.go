package codec

import (
	"bytes"
	"hash/maphash"
	"slices"
	"strconv"

	"github.com/flowstate-io/flowstate/flowstate"
)

// Decoder decodes heartbeat reports. Its zero value is ready to use, with no
// limit on the number of flows. A Decoder keeps scratch buffers between
// calls, so that decoding a steady stream of reports does not allocate; it
// is not safe for concurrent use.
type Decoder struct {
	// MaxFlows is the most distinct flow ids a report may name across its
	// maps (GreptimeDB's three, processed_rows and last_errors); 0 (or less) means no limit. A report over the limit is rejected as
	// soon as that shows, before the rest of it is read.
	MaxFlows int
	// MaxUnknownFields is the most unknown fields a report may have; 0
	// means DefaultMaxUnknownFields, and less than 0 no limit. A report
	// over the limit is rejected (KindTooManyUnknownFields) at the first
	// field over it, before the rest is read.
	MaxUnknownFields int

	ents    []entry          // the flows of the map read last, not yet in union
	entsBit flowstate.Fields // the map ents came from
	tmp     []entry          // spare buffer for sorting ents
	union   []flowstate.Flow // the flows of the maps read before ents, sorted
	spare   []flowstate.Flow // spare buffer for merging into union
	names   []span           // where the names of unknown fields are
	hashes  []uint64         // spare buffer for sorting their hashes
	// ordinary counts the reports in a row that used a small part of the
	// scratch buffers above; see settle.
	ordinary int
	// messages holds the error messages read before, so that a repeated
	// message reuses its string (see intern); recent is a direct-mapped
	// cache in front of it (see seenMessage).
	messages map[string]string
	recent   [recentMessages]string
	// healthRun is where the second health map's flows start in
	// Report.Health.Flows (0: one run only); htmp is scratch for joining
	// the two runs.
	healthRun int
	htmp      []flowstate.FlowHealth
	// stats and statsErrs are what DecodeStats reads of the stats view's
	// processed_rows and last_errors: its flows in the order read, and the
	// backing store of their error lists.
	stats     []flowstate.FlowStats
	statsErrs []flowstate.StatsError
}

// body is the kind of msgpack map a Decoder reads: a report, or one of the
// views that share its maps.
type bodyKind uint8

const (
	bodyReport    bodyKind = iota
	bodyAggregate          // GreptimeDB's value: the three maps only
	bodyStats              // the stats view: the three maps, processed_rows and last_errors
)

// DefaultMaxUnknownFields is the limit on unknown fields of a Decoder
// whose MaxUnknownFields is 0. A flownode sends five known fields; newer
// ones may send a few more.
const DefaultMaxUnknownFields = 1024

// span locates a field name in the body.
type span struct {
	off, end int
	hash     uint64 // set by duplicateName
}

// field is a field of the report map.
type field uint8

const (
	fieldUnknown field = iota
	fieldNodeID
	fieldNodeEpoch
	fieldStateSize
	fieldLastExecTime
	fieldStartTime
	fieldProcessedRows
	fieldLastErrors
	fieldSeq
)

var fieldNames = [...]string{
	fieldNodeID:        "node_id",
	fieldNodeEpoch:     "node_epoch",
	fieldStateSize:     "state_size",
	fieldLastExecTime:  "last_exec_time_map",
	fieldStartTime:     "start_time_map",
	fieldProcessedRows: "processed_rows",
	fieldLastErrors:    "last_errors",
	fieldSeq:           "seq",
}

func fieldOf(name []byte, kind bodyKind) field {
	switch string(name) {
	case "node_id":
		if kind == bodyReport {
			return fieldNodeID
		}
	case "node_epoch":
		if kind == bodyReport {
			return fieldNodeEpoch
		}
	case "state_size":
		return fieldStateSize
	case "last_exec_time_map":
		return fieldLastExecTime
	case "start_time_map":
		return fieldStartTime
	case "processed_rows":
		if kind != bodyAggregate {
			return fieldProcessedRows
		}
	case "last_errors":
		if kind != bodyAggregate {
			return fieldLastErrors
		}
	case "seq":
		if kind == bodyReport {
			return fieldSeq
		}
	}
	return fieldUnknown
}

// Decode decodes the heartbeat report in data into r, following the rules
// of PROTOCOL.md. It reuses r.Flows' capacity and keeps no reference to
// data. A rejected report returns a *DecodeError, which wraps
// ErrInvalidReport, and leaves r empty.
func (d *Decoder) Decode(data []byte, r *Report) error {
	if err := d.decode(data, r, bodyReport); err != nil {
		return err
	}
	return nil
}

func (d *Decoder) decode(data []byte, r *Report, kind bodyKind) *DecodeError {
	flows := r.Flows[:0]
	r.reset(flows)
	d.ents, d.entsBit = d.ents[:0], 0
	d.union = d.union[:0]
	d.names = d.names[:0]
	d.healthRun = 0
	defer d.settle()
	err := d.parse(data, r, kind)
	if err == nil {
		if len(d.union) == len(d.ents) {
			r.Flows = append(flows, d.union...)
			if !update(r.Flows, d.ents, d.entsBit) {
				r.Flows = merge(flows, d.union, d.ents, d.entsBit)
			}
		} else {
			r.Flows = merge(flows, d.union, d.ents, d.entsBit)
		}
		if kind == bodyStats {
			err = d.joinStats()
		} else {
			err = d.joinHealth(r)
		}
	}
	if err != nil {
		r.reset(flows)
		err.body = kind
		return err
	}
	return nil
}

// parse reads the report map, leaving its flows in d.union and d.ents.
func (d *Decoder) parse(b []byte, r *Report, kind bodyKind) *DecodeError {
	if len(b) == 0 {
		return newError("", KindEmpty, "empty body")
	}
	n, i, st := mapLenAt(b, 0)
	if st != ok {
		return topLevelError(b, st)
	}
	var seen uint16
	maxUnknown := d.MaxUnknownFields
	if maxUnknown == 0 {
		maxUnknown = DefaultMaxUnknownFields
	}
	for ; n > 0; n-- {
		name, j, st := strAt(b, i)
		if st != ok {
			return scanError("", st, codeAt(b, i), "a string field name")
		}
		f := fieldOf(name, kind)
		if f != fieldUnknown {
			if seen&(1<<f) != 0 {
				return newError(fieldNames[f], KindDuplicateField, "named twice")
			}
			seen |= 1 << f
		}
		var err *DecodeError
		switch f {
		case fieldNodeID:
			r.NodeID, j, err = uintField(b, j, "node_id")
		case fieldNodeEpoch:
			if j < len(b) && b[j] == codeNil {
				j++
				break
			}
			r.NodeEpoch, j, err = uintField(b, j, "node_epoch")
			r.HasNodeEpoch = true
		case fieldStateSize, fieldLastExecTime, fieldStartTime:
			j, err = d.flowMap(b, j, f)
		case fieldProcessedRows, fieldLastErrors:
			if kind == bodyStats {
				j, err = d.statsMap(b, j, f)
			} else {
				j, err = d.healthMap(b, j, f, r)
			}
		case fieldSeq:
			if j < len(b) && b[j] == codeNil {
				j++
				break
			}
			r.Health.Seq, j, err = uintField(b, j, "seq")
			r.Health.HasSeq = true
		default:
			if maxUnknown > 0 && len(d.names) >= maxUnknown {
				return newError("", KindTooManyUnknownFields,
					"more than "+strconv.Itoa(maxUnknown)+" unknown fields (the limit)")
			}
			d.names = append(d.names, span{off: j - len(name), end: j})
			var st status
			if j, st = skipAt(b, j, 2); st != ok {
				err = scanError(namePath(name), st, 0, "")
			}
		}
		if err != nil {
			return err
		}
		i = j
	}
	if i != len(b) {
		return newError("", KindTrailingBytes, strconv.Itoa(len(b)-i)+" bytes after the report")
	}
	if kind == bodyReport && seen&(1<<fieldNodeID) == 0 {
		return newError("node_id", KindMissingNodeID, "missing")
	}
	if name := d.duplicateName(b); name != nil {
		return newError(namePath(name), KindDuplicateField, "named twice")
	}
	return nil
}

// topLevelError explains why a body does not start with a map.
func topLevelError(b []byte, st status) *DecodeError {
	if st == truncated {
		return newError("", KindNotMsgpack, "truncated")
	}
	if j, st := skipAt(b, 0, 1); st == truncated || st == invalid || st == ok && j != len(b) {
		return newError("", KindNotMsgpack, "not a msgpack value")
	}
	return newError("", KindBadType, "body is "+typeName(b[0])+", want a map")
}

// uintField reads the unsigned integer value of field name.
func uintField(b []byte, i int, name string) (uint64, int, *DecodeError) {
	v, neg, j, st := intAt(b, i)
	if st != ok {
		return 0, i, scanError(name, st, codeAt(b, i), "an unsigned integer")
	}
	if neg {
		return 0, i, newError(name, KindOutOfRange, "negative value "+strconv.FormatInt(int64(v), 10))
	}
	return v, j, nil
}

// nameSeed seeds the hashes of field names.
var nameSeed = maphash.MakeSeed()

// duplicateName returns the name of an unknown field named twice, if any.
// Beyond a few names, it sorts their hashes and compares the names of equal
// hashes only: O(n log n) with a small constant, so that a hostile report
// of a million distinct names costs milliseconds.
func (d *Decoder) duplicateName(b []byte) []byte {
	names := d.names
	name := func(s span) []byte { return b[s.off:s.end] }
	if len(names) <= 8 {
		for k := 1; k < len(names); k++ {
			for m := range k {
				if bytes.Equal(name(names[m]), name(names[k])) {
					return name(names[k])
				}
			}
		}
		return nil
	}
	hashes := d.hashes[:0]
	for k := range names {
		names[k].hash = maphash.Bytes(nameSeed, name(names[k]))
		hashes = append(hashes, names[k].hash)
	}
	d.hashes = hashes
	slices.Sort(hashes)
	for k := 1; k < len(hashes); k++ {
		if hashes[k] != hashes[k-1] || k > 1 && hashes[k-2] == hashes[k] {
			continue
		}
		// Names that share a hash are almost surely the same name.
		h := hashes[k]
		for m := range names {
			if names[m].hash != h {
				continue
			}
			for l := m + 1; l < len(names); l++ {
				if names[l].hash == h && bytes.Equal(name(names[m]), name(names[l])) {
					return name(names[l])
				}
			}
		}
	}
	return nil
}
