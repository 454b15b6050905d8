package flowstate

import (
	"slices"
	"strconv"
)

// StatsError is an error in the stats view: a node's error of a flow, with
// the node that reported it.
type StatsError struct {
	Time    int64
	NodeID  uint64
	Message string
}

// FlowStats is one flow's health over all nodes (PROTOCOL.md v3, the stats
// view): the most rows any node reports for it, and its MaxFlowErrors newest
// errors over all nodes, newest first. HasLastErrors is set only with at
// least one error.
type FlowStats struct {
	ID            FlowID
	Has           HealthFields
	ProcessedRows uint64
	LastErrors    []StatsError
}

// NodeHealth is one node's health, as MergeHealth takes it.
type NodeHealth struct {
	NodeID uint64
	Health *Health
}

// MergeHealth merges the health of nodes into the stats of each flow,
// appended to dst[:0] sorted by ID: processed_rows is the maximum over the
// nodes that report it; last_errors the MaxFlowErrors newest errors over all
// nodes, newest first, equal times in ascending node id and then in the
// node's own order. A flow appears only where some node reported it, and in
// last_errors only with at least one error. nodes may be in any order; nil
// Healths are skipped.
func MergeHealth(dst []FlowStats, nodes []NodeHealth) []FlowStats {
	// Each flow keeps its MaxFlowErrors best candidates as they come, in
	// order: the cost is linear in the errors, and nothing is sorted but
	// the flows.
	type candidate struct {
		node  uint64
		order int
		err   FlowError
	}
	type top struct {
		n int
		c [MaxFlowErrors]candidate
	}
	before := func(a, b *candidate) bool {
		if a.err.Time != b.err.Time {
			return a.err.Time > b.err.Time
		}
		if a.node != b.node {
			return a.node < b.node
		}
		return a.order < b.order
	}
	out := dst[:0]
	var tops []top
	kept := 0
	index := make(map[FlowID]int)
	for _, n := range nodes {
		if n.Health == nil {
			continue
		}
		for i := range n.Health.Flows {
			f := &n.Health.Flows[i]
			k, ok := index[f.ID]
			if !ok {
				k = len(out)
				index[f.ID] = k
				out = append(out, FlowStats{ID: f.ID})
				tops = append(tops, top{})
			}
			s := &out[k]
			if f.Has&HasProcessedRows != 0 {
				if s.Has&HasProcessedRows == 0 || f.ProcessedRows > s.ProcessedRows {
					s.ProcessedRows = f.ProcessedRows
				}
				s.Has |= HasProcessedRows
			}
			t := &tops[k]
			for o, e := range f.LastErrors {
				c := candidate{node: n.NodeID, order: o, err: e}
				if t.n == MaxFlowErrors && !before(&c, &t.c[MaxFlowErrors-1]) {
					continue
				}
				j := min(t.n, MaxFlowErrors-1)
				for ; j > 0 && before(&c, &t.c[j-1]); j-- {
					t.c[j] = t.c[j-1]
				}
				t.c[j] = c
				if t.n < MaxFlowErrors {
					t.n++
					kept++
				}
			}
		}
	}
	all := make([]StatsError, 0, kept) // every flow's errors in one array
	for k := range out {
		t := &tops[k]
		if t.n == 0 {
			continue
		}
		start := len(all)
		for _, c := range t.c[:t.n] {
			all = append(all, StatsError{Time: c.err.Time, NodeID: c.node, Message: c.err.Message})
		}
		out[k].LastErrors = all[start:len(all):len(all)]
		out[k].Has |= HasLastErrors
	}
	// A flow named only in last_errors with no error contributes nothing.
	out = slices.DeleteFunc(out, func(s FlowStats) bool { return s.Has == 0 })
	slices.SortFunc(out, func(a, b FlowStats) int { return cmpID(a.ID, b.ID) })
	return out
}

// AppendStatsJSON appends the stats view in JSON to dst: GreptimeDB's value
// (flows, as AppendJSON writes it) followed by processed_rows and
// last_errors, flow ids as strings in ascending numeric order, no spaces,
// errors as {"time":...,"node_id":...,"message":"..."}, e.g.
// {"state_size":{"1":1024},"last_exec_time_map":{"1":1700000000000},"start_time_map":{},"processed_rows":{"1":52000},"last_errors":{"1":[{"time":1700000000000,"node_id":7,"message":"sink table missing"}]}}.
// stats are sorted by ID, as MergeHealth returns them.
func AppendStatsJSON(dst []byte, flows []Flow, stats []FlowStats) []byte {
	dst = AppendJSON(dst, flows)
	dst = append(dst[:len(dst)-1], `,"processed_rows":{`...)
	first := true
	for i := range stats {
		s := &stats[i]
		if s.Has&HasProcessedRows != 0 {
			dst = appendKey(dst, s.ID, first)
			dst = strconv.AppendUint(dst, s.ProcessedRows, 10)
			first = false
		}
	}
	dst = append(dst, `},"last_errors":{`...)
	first = true
	for i := range stats {
		s := &stats[i]
		if s.Has&HasLastErrors == 0 || len(s.LastErrors) == 0 {
			continue
		}
		dst = appendKey(dst, s.ID, first)
		dst = append(dst, '[')
		for k, e := range s.LastErrors {
			if k > 0 {
				dst = append(dst, ',')
			}
			dst = appendErrorJSON(dst, e.Time, &e.NodeID, e.Message)
		}
		dst = append(dst, ']')
		first = false
	}
	return append(dst, "}}"...)
}

// StatsView is the stats view of a state (PROTOCOL.md v3, Flow-State-View:
// stats) as values.
type StatsView struct {
	// Flows is GreptimeDB's aggregate at the view's revision: per flow its
	// state size, last execution and start time. Sorted by ID, each ID once.
	Flows []Flow
	// Stats is per flow its health over the nodes that report it: the most
	// rows any of them processed, and its MaxFlowErrors newest errors, each
	// with the node that reported it, newest first. Sorted by ID, each ID
	// once; a flow is here only where some node reports its health.
	Stats []FlowStats
}

// Value returns v's aggregate as GreptimeDB's value.
func (v StatsView) Value() FlowStateValue { return ValueOf(v.Flows) }

// AppendJSON appends v's JSON to dst: the bytes a get of the stats view with
// Accept: application/json answers for the same state (AppendStatsJSON).
func (v StatsView) AppendJSON(dst []byte) []byte { return AppendStatsJSON(dst, v.Flows, v.Stats) }

// MarshalJSON returns AppendJSON(nil). encoding/json's Marshal, and an
// Encoder unless SetEscapeHTML(false), further escape <, >, & and the line
// and paragraph separators U+2028 and U+2029 in error messages, which the
// worker's bytes do not: call AppendJSON (or this method) for the worker's
// bytes.
func (v StatsView) MarshalJSON() ([]byte, error) { return v.AppendJSON(nil), nil }

// StatsJSONLen is the length of AppendStatsJSON's encoding of flows and
// stats, computed without rendering it: a view too large for one message
// is refused before any of it is written.
func StatsJSONLen(flows []Flow, stats []FlowStats) int {
	n := len(`{"state_size":{},"last_exec_time_map":{},"start_time_map":{},"processed_rows":{},"last_errors":{}}`)
	var entries [3]int
	for i := range flows {
		f := &flows[i]
		key := keyLen(f.ID)
		if f.Has&HasStateSize != 0 {
			n += key + uintLen(f.StateSize)
			entries[0]++
		}
		if f.Has&HasLastExecTime != 0 {
			n += key + intLen(f.LastExecTime)
			entries[1]++
		}
		if f.Has&HasStartTime != 0 {
			n += key + intLen(f.StartTime)
			entries[2]++
		}
	}
	rows, errFlows := 0, 0
	for i := range stats {
		s := &stats[i]
		if s.Has&HasProcessedRows != 0 {
			n += keyLen(s.ID) + uintLen(s.ProcessedRows)
			rows++
		}
		if s.Has&HasLastErrors == 0 || len(s.LastErrors) == 0 {
			continue
		}
		n += keyLen(s.ID) + len(`[]`) + len(s.LastErrors) - 1
		for _, e := range s.LastErrors {
			n += len(`{"time":,"node_id":,"message":}`) + intLen(e.Time) + uintLen(e.NodeID) + JSONStringLen(e.Message)
		}
		errFlows++
	}
	for _, k := range [...]int{entries[0], entries[1], entries[2], rows, errFlows} {
		n += max(k-1, 0) // commas between entries
	}
	return n
}

// keyLen is the length of appendKey's "id": without its comma.
func keyLen(id FlowID) int { return uintLen(uint64(id)) + len(`"":`) }

func uintLen(v uint64) int {
	n := 1
	for v >= 10 {
		v /= 10
		n++
	}
	return n
}

func intLen(v int64) int {
	if v < 0 {
		return 1 + uintLen(uint64(-(v+1))+1)
	}
	return uintLen(uint64(v))
}
