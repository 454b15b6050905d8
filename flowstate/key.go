package flowstate

import (
	"strconv"
	"strings"
)

// The store layout, byte for byte GreptimeDB's.
const (
	// StateKey holds the aggregate of every node's report.
	StateKey = "__flow/state"
	// NodeKeyPrefix starts the key of each node's last report.
	NodeKeyPrefix = "__flow/state/node/"
)

// NodeKey returns the key of a node's report: __flow/state/node/{nodeID}.
func NodeKey(nodeID uint64) string {
	return NodeKeyPrefix + strconv.FormatUint(nodeID, 10)
}

// NodeOfKey returns the node whose key is key, if key is exactly
// NodeKey(id): the prefix, then the id in canonical decimal (digits only,
// no sign, no leading zero, within uint64). Any other key under the prefix
// is no node's key.
func NodeOfKey(key string) (uint64, bool) {
	digits, ok := strings.CutPrefix(key, NodeKeyPrefix)
	if !ok || (len(digits) > 1 && digits[0] == '0') {
		return 0, false
	}
	id, err := strconv.ParseUint(digits, 10, 64) // digits only: no sign, no underscore in base 10
	return id, err == nil
}
