package codec

// AppendReport appends r as a heartbeat report to dst: a map of node_id,
// node_epoch (when r.HasNodeEpoch) and the three maps (always, empty or
// not), with integer flow ids in the order of r.Flows and every integer in
// its shortest form. r.Flows should be sorted by ID, each ID once, as
// Decode returns them: a flow named twice makes a report that Decode
// rejects, and a flow with no field is left out. It does not allocate
// beyond growing dst.
func AppendReport(dst []byte, r *Report) []byte {
	if r.HasNodeEpoch {
		dst = append(dst, codeFixMap|5)
	} else {
		dst = append(dst, codeFixMap|4)
	}
	dst = appendUint(appendName(dst, "node_id"), r.NodeID)
	if r.HasNodeEpoch {
		dst = appendUint(appendName(dst, "node_epoch"), r.NodeEpoch)
	}
	return appendFlowMaps(dst, r.Flows)
}
