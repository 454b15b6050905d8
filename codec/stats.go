package codec

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/flowstate-io/flowstate/flowstate"
)

// AppendStats appends the stats view (PROTOCOL.md v3) to dst: a map with the
// string keys state_size, last_exec_time_map, start_time_map (GreptimeDB's
// aggregate of flows, as AppendAggregate writes it), processed_rows and
// last_errors (of stats, as flowstate.MergeHealth returns them), integer
// flow ids ascending, each error a map of time, node_id and message in that
// order, every integer in its shortest form. flows and stats are sorted by
// ID. A flow of stats is in last_errors only with at least one error. It
// does not allocate beyond growing dst.
func AppendStats(dst []byte, flows []flowstate.Flow, stats []flowstate.FlowStats) []byte {
	dst = append(dst, codeFixMap|5)
	dst = appendFlowMaps(dst, flows)
	rows, errs := countStats(stats)
	dst = appendName(dst, "processed_rows")
	dst = appendMapLen(dst, rows)
	for i := range stats {
		if s := &stats[i]; s.Has&flowstate.HasProcessedRows != 0 {
			dst = appendUint(appendUint(dst, uint64(s.ID)), s.ProcessedRows)
		}
	}
	dst = appendName(dst, "last_errors")
	dst = appendMapLen(dst, errs)
	for i := range stats {
		s := &stats[i]
		if !hasErrors(s) {
			continue
		}
		dst = appendArrayLen(appendUint(dst, uint64(s.ID)), len(s.LastErrors))
		for _, e := range s.LastErrors {
			dst = append(dst, codeFixMap|3)
			dst = appendInt(appendName(dst, "time"), e.Time)
			dst = appendUint(appendName(dst, "node_id"), e.NodeID)
			dst = appendStr(appendName(dst, "message"), e.Message)
		}
	}
	return dst
}

func hasErrors(s *flowstate.FlowStats) bool {
	return s.Has&flowstate.HasLastErrors != 0 && len(s.LastErrors) > 0
}

// countStats counts the entries of the processed_rows and last_errors maps.
func countStats(stats []flowstate.FlowStats) (rows, errs int) {
	for i := range stats {
		if stats[i].Has&flowstate.HasProcessedRows != 0 {
			rows++
		}
		if hasErrors(&stats[i]) {
			errs++
		}
	}
	return rows, errs
}

// appendStr appends a string in its shortest msgpack form.
func appendStr(dst []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		dst = append(dst, codeFixStr|byte(n))
	case n < 1<<8:
		dst = append(dst, codeStr8, byte(n))
	case n < 1<<16:
		dst = append(dst, codeStr16, byte(n>>8), byte(n))
	default:
		dst = append(dst, codeStr32, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(dst, s...)
}

// strLen is the size of a string of n bytes in its shortest form.
func strLen(n int) int {
	switch {
	case n < 32:
		return 1 + n
	case n < 1<<8:
		return 2 + n
	case n < 1<<16:
		return 3 + n
	}
	return 5 + n
}

// statsFixedLen is the size of a stats view's map header and its five field
// names.
const statsFixedLen = aggregateFixedLen + 2 + len("processed_rows") + len("last_errors")

// flowStatsLen is the size one flow's stats add to the two health maps, map
// headers aside.
func flowStatsLen(s *flowstate.FlowStats) int {
	id := uintLen(uint64(s.ID))
	n := 0
	if s.Has&flowstate.HasProcessedRows != 0 {
		n += id + uintLen(s.ProcessedRows)
	}
	if hasErrors(s) {
		n += id + mapLenLen(len(s.LastErrors)) // an array header is as long as a map's
		for _, e := range s.LastErrors {
			n += 1 + 1 + len("time") + intLen(e.Time) + 1 + len("node_id") + uintLen(e.NodeID) +
				1 + len("message") + strLen(len(e.Message))
		}
	}
	return n
}

// StatsLen is the size of AppendStats(nil, flows, stats).
func StatsLen(flows []flowstate.Flow, stats []flowstate.FlowStats) int {
	return AggregateLen(flows) - aggregateFixedLen + statsFixedLen + statsBodyLen(stats)
}

func statsBodyLen(stats []flowstate.FlowStats) int {
	rows, errs := countStats(stats)
	n := mapLenLen(rows) + mapLenLen(errs)
	for i := range stats {
		n += flowStatsLen(&stats[i])
	}
	return n
}

// StatsChunk ends one chunk of a stats view: the chunk holds
// flows[previous Flows:Flows] and stats[previous Stats:Stats] (0 before the
// first chunk).
type StatsChunk struct {
	Flows, Stats int
}

// SplitStats splits a stats view, flows and stats sorted by ID, into
// consecutive chunks of ascending, disjoint flow id ranges whose AppendStats
// encodings each take at most budget bytes (PROTOCOL.md v3, the stats view
// with Flow-State-Chunks), as SplitAggregate does for GreptimeDB's view. A
// flow id's entries in flows and in stats go in one chunk. The chunk ends
// are appended to dst[:0]. An empty view is one empty chunk. A budget that
// cannot hold one flow returns ErrChunkBudget.
func SplitStats(dst []StatsChunk, flows []flowstate.Flow, stats []flowstate.FlowStats, budget int) ([]StatsChunk, error) {
	ends := dst[:0]
	var n [5]int // entries per map in the current chunk
	body := 0
	chunkLen := func(body int, n [5]int) int {
		l := statsFixedLen + body
		for _, c := range n {
			l += mapLenLen(c)
		}
		return l
	}
	i, k := 0, 0 // next flow, next stats
	start := StatsChunk{}
	for i < len(flows) || k < len(stats) {
		// The next flow id and its entries.
		var id flowstate.FlowID
		switch {
		case k == len(stats) || i < len(flows) && flows[i].ID <= stats[k].ID:
			id = flows[i].ID
		default:
			id = stats[k].ID
		}
		add, m := 0, n
		ni, nk := i, k
		if ni < len(flows) && flows[ni].ID == id {
			f := &flows[ni]
			add += flowAggregateLen(f)
			c := countFields([3]int{m[0], m[1], m[2]}, f.Has)
			m[0], m[1], m[2] = c[0], c[1], c[2]
			ni++
		}
		if nk < len(stats) && stats[nk].ID == id {
			s := &stats[nk]
			add += flowStatsLen(s)
			if s.Has&flowstate.HasProcessedRows != 0 {
				m[3]++
			}
			if hasErrors(s) {
				m[4]++
			}
			nk++
		}
		if chunkLen(body+add, m) > budget {
			alone := [5]int{}
			for x := range m {
				alone[x] = m[x] - n[x]
			}
			if chunkLen(add, alone) > budget {
				return nil, fmt.Errorf("%w: flow %d takes %d bytes, budget %d", ErrChunkBudget, id, chunkLen(add, alone), budget)
			}
			if i != start.Flows || k != start.Stats {
				start = StatsChunk{Flows: i, Stats: k}
				ends = append(ends, start)
			}
			body, m = add, alone
		} else {
			body += add
		}
		n, i, k = m, ni, nk
	}
	if len(flows) == 0 && len(stats) == 0 && chunkLen(0, n) > budget {
		return nil, fmt.Errorf("%w: budget %d", ErrChunkBudget, budget)
	}
	return append(ends, StatsChunk{Flows: len(flows), Stats: len(stats)}), nil
}

// DecodeStats decodes a stats view (PROTOCOL.md v3, Flow-State-View: stats)
// in msgpack form, a whole view or one chunk of it, as AppendStats writes it
// or as any other msgpack encoder may: GreptimeDB's three maps as
// DecodeAggregate reads them, and processed_rows (flow id -> uint64) and
// last_errors (flow id -> array of at most flowstate.MaxFlowErrors errors,
// each a map of time, node_id and message, all three required, other keys
// skipped, the message 1 to flowstate.MaxErrorMessage bytes of UTF-8). Keys
// may come in any order; an absent or nil map is empty; unknown fields are
// skipped; flow ids may be integers or canonical decimal strings, in any
// order, each once per map. A flow whose error list is empty is left out of
// last_errors, and out of the view's stats if it has no processed rows
// either, as the worker writes a view. An invalid body returns a
// *DecodeError that wraps ErrInvalidStats. The view's slices are sorted by
// ID and share no memory with data.
func DecodeStats(data []byte) (flowstate.StatsView, error) {
	var d Decoder
	var r Report
	if err := d.decode(data, &r, bodyStats); err != nil {
		return flowstate.StatsView{}, err
	}
	return flowstate.StatsView{Flows: r.Flows, Stats: d.stats}, nil
}

// statsMap reads the stats view's processed_rows or last_errors at b[i:]
// into d.stats, each entry's Has saying which map it came from; joinStats
// joins them once the view is read.
func (d *Decoder) statsMap(b []byte, i int, f field) (int, *DecodeError) {
	name := fieldNames[f]
	n, present, i, err := fieldMap(b, i, name)
	if err != nil || !present {
		return i, err
	}
	for ; n > 0; n-- {
		id, j, err := mapFlowID(b, i, name)
		if err != nil {
			return j, err
		}
		i = j
		s := flowstate.FlowStats{ID: flowstate.FlowID(id), Has: healthBits[f]}
		if f == fieldProcessedRows {
			s.ProcessedRows, i, err = uintField(b, i, flowPath(name, id))
		} else {
			s.LastErrors, i, err = errorList(d, b, i, id, true, &d.statsErrs, func(e flowstate.StatsError) flowstate.StatsError { return e })
		}
		if err != nil {
			return i, err
		}
		d.stats = append(d.stats, s)
	}
	return i, nil
}

// joinStats sorts d.stats by ID and joins each flow's processed rows and
// errors into one entry, refusing a flow named twice in one map. A flow's
// empty error list is dropped, and so is a flow left with no field.
func (d *Decoder) joinStats() *DecodeError {
	slices.SortStableFunc(d.stats, func(a, b flowstate.FlowStats) int { return cmp.Compare(a.ID, b.ID) })
	out := d.stats[:0]
	for _, s := range d.stats {
		if k := len(out) - 1; k >= 0 && out[k].ID == s.ID {
			if out[k].Has&s.Has != 0 {
				name := fieldNames[fieldProcessedRows]
				if s.Has&flowstate.HasLastErrors != 0 {
					name = fieldNames[fieldLastErrors]
				}
				return newError(flowPath(name, uint64(s.ID)), KindDuplicateFlow, "named twice")
			}
			joinFlowStats(&out[k], &s)
			continue
		}
		out = append(out, s)
	}
	d.stats = out[:0]
	for _, s := range out {
		if len(s.LastErrors) == 0 {
			s.Has &^= flowstate.HasLastErrors
			s.LastErrors = nil
		}
		if s.Has != 0 {
			d.stats = append(d.stats, s)
		}
	}
	return nil
}

// joinFlowStats copies the fields that src has into s.
func joinFlowStats(s, src *flowstate.FlowStats) {
	s.Has |= src.Has
	if src.Has&flowstate.HasProcessedRows != 0 {
		s.ProcessedRows = src.ProcessedRows
	}
	if src.Has&flowstate.HasLastErrors != 0 {
		s.LastErrors = src.LastErrors
	}
}
