package codec

// NodeView is one entry of the node view that a worker answers on
// <prefix>.state.nodes (PROTOCOL.md): a node, the node_epoch of its last
// report (nil if it sent none), when that report was applied (unix
// milliseconds) and how many flows it named. The tags name its fields in
// msgpack, as AppendNodes writes them, and in JSON.
type NodeView struct {
	NodeID     uint64  `msgpack:"node_id" json:"node_id"`
	NodeEpoch  *uint64 `msgpack:"node_epoch" json:"node_epoch"`
	LastReport int64   `msgpack:"last_report" json:"last_report"`
	Flows      int     `msgpack:"flows" json:"flows"`
}

// AppendNodes appends the msgpack form of a node view to dst: an array
// with, for each node in the order given, a map with the string keys
// node_id, node_epoch (nil when absent), last_report and flows in that
// order, every integer in its shortest form. It does not allocate beyond
// growing dst.
func AppendNodes(dst []byte, nodes []NodeView) []byte {
	dst = appendArrayLen(dst, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		dst = append(dst, codeFixMap|4)
		dst = appendUint(appendName(dst, "node_id"), n.NodeID)
		dst = appendName(dst, "node_epoch")
		if n.NodeEpoch == nil {
			dst = append(dst, codeNil)
		} else {
			dst = appendUint(dst, *n.NodeEpoch)
		}
		dst = appendInt(appendName(dst, "last_report"), n.LastReport)
		dst = appendInt(appendName(dst, "flows"), int64(n.Flows))
	}
	return dst
}

// minNodeLen is the fewest bytes AppendNodes writes for one node: the map
// header, the four names, and a value of one byte each.
const minNodeLen = 1 + 1 + len("node_id") + 1 + len("node_epoch") + 1 + len("last_report") + 1 + len("flows") + 4

// MinNodesLen returns the fewest bytes AppendNodes writes for n nodes,
// whatever their values, so that a caller can refuse a view too large to
// send from the node count alone, before it copies or encodes anything.
func MinNodesLen(n int) int {
	return arrayLenLen(n) + n*minNodeLen
}

// arrayLenLen is the length appendArrayLen writes; the same as a map's.
func arrayLenLen(n int) int { return mapLenLen(n) }
