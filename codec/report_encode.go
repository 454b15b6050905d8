package codec

import "github.com/flowstate-io/flowstate/flowstate"

// AppendReport appends r as a heartbeat report to dst: a map of node_id,
// node_epoch (when r.HasNodeEpoch), the three maps (always, empty or not),
// then the v3 fields that r.Health has: processed_rows, last_errors (each
// error a map of time and message) and seq, with integer flow ids in the
// order of r.Flows and r.Health.Flows and every integer in its shortest
// form. Both lists should be sorted by ID, each ID once, as Decode returns
// them: a flow named twice makes a report that Decode rejects, and a flow
// with no field is left out. It does not allocate beyond growing dst.
func AppendReport(dst []byte, r *Report) []byte {
	h := &r.Health
	n := 4
	for _, has := range [...]bool{r.HasNodeEpoch, h.HasProcessedRows, h.HasLastErrors, h.HasSeq} {
		if has {
			n++
		}
	}
	dst = append(dst, codeFixMap|byte(n))
	dst = appendUint(appendName(dst, "node_id"), r.NodeID)
	if r.HasNodeEpoch {
		dst = appendUint(appendName(dst, "node_epoch"), r.NodeEpoch)
	}
	dst = appendFlowMaps(dst, r.Flows)
	if h.HasProcessedRows {
		dst = appendName(dst, "processed_rows")
		dst = appendMapLen(dst, countHealth(h.Flows, flowstate.HasProcessedRows))
		for i := range h.Flows {
			if f := &h.Flows[i]; f.Has&flowstate.HasProcessedRows != 0 {
				dst = appendUint(appendUint(dst, uint64(f.ID)), f.ProcessedRows)
			}
		}
	}
	if h.HasLastErrors {
		dst = appendName(dst, "last_errors")
		dst = appendMapLen(dst, countHealth(h.Flows, flowstate.HasLastErrors))
		for i := range h.Flows {
			f := &h.Flows[i]
			if f.Has&flowstate.HasLastErrors == 0 {
				continue
			}
			dst = appendArrayLen(appendUint(dst, uint64(f.ID)), len(f.LastErrors))
			for _, e := range f.LastErrors {
				dst = append(dst, codeFixMap|2)
				dst = appendInt(appendName(dst, "time"), e.Time)
				dst = appendStr(appendName(dst, "message"), e.Message)
			}
		}
	}
	if h.HasSeq {
		dst = appendUint(appendName(dst, "seq"), h.Seq)
	}
	return dst
}

// countHealth counts the flows that have bit.
func countHealth(flows []flowstate.FlowHealth, bit flowstate.HealthFields) int {
	n := 0
	for i := range flows {
		if flows[i].Has&bit != 0 {
			n++
		}
	}
	return n
}
