package flowstate

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The store layout, byte for byte the seed's.
const (
	// StateKey holds the aggregate of every node's report.
	StateKey = "__flow/state"
	// NodeKeyPrefix starts the key of each node's last report.
	NodeKeyPrefix = "__flow/state/node/"
)

// The kinds of key error, as the seed reports them. A *KeyError wraps one.
var (
	ErrKeyNotUTF8    = errors.New("flowstate: key is not a valid UTF-8 string")
	ErrInvalidKey    = errors.New("flowstate: invalid flow state key")
	ErrInvalidNodeID = errors.New("flowstate: invalid node id in flow state key")
)

// KeyError is the error of ParseStateKey and ParseNodeKey.
type KeyError struct {
	Key  string // the key as given, invalid UTF-8 replaced
	Kind error  // ErrKeyNotUTF8, ErrInvalidKey or ErrInvalidNodeID
}

func (e *KeyError) Error() string { return fmt.Sprintf("%v: %q", e.Kind, e.Key) }

// Unwrap returns e.Kind, for errors.Is.
func (e *KeyError) Unwrap() error { return e.Kind }

// NodeKey returns the key of a node's report: __flow/state/node/{nodeID}.
func NodeKey(nodeID uint64) string {
	return NodeKeyPrefix + strconv.FormatUint(nodeID, 10)
}

// ParseStateKey checks that key is StateKey.
func ParseStateKey(key []byte) error {
	if !utf8.Valid(key) {
		return &KeyError{Key: strings.ToValidUTF8(string(key), "\uFFFD"), Kind: ErrKeyNotUTF8}
	}
	if string(key) != StateKey {
		return &KeyError{Key: string(key), Kind: ErrInvalidKey}
	}
	return nil
}

// ParseNodeKey returns the node id of a key made by NodeKey. Like the seed's
// (Rust's u64::from_str), it accepts an optional leading '+' and leading
// zeros.
func ParseNodeKey(key []byte) (uint64, error) {
	if !utf8.Valid(key) {
		return 0, &KeyError{Key: strings.ToValidUTF8(string(key), "\uFFFD"), Kind: ErrKeyNotUTF8}
	}
	s := string(key)
	digits, ok := strings.CutPrefix(s, NodeKeyPrefix)
	if !ok {
		return 0, &KeyError{Key: s, Kind: ErrInvalidKey}
	}
	digits = strings.TrimPrefix(digits, "+")
	if digits == "" || digits[0] < '0' || digits[0] > '9' {
		return 0, &KeyError{Key: s, Kind: ErrInvalidNodeID}
	}
	id, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, &KeyError{Key: s, Kind: ErrInvalidNodeID}
	}
	return id, nil
}
