package state

import (
	"errors"
	"fmt"
)

// Limits bound what the state holds, so that no client can grow it without
// bound (PROTOCOL.md, "Capacity"). Zero means no limit.
type Limits struct {
	// MaxNodes is the most nodes the state holds: every node that has
	// reported in the epoch, its last report empty or not, until evicted.
	MaxNodes int
	// MaxFlows is the most distinct flows the aggregate holds.
	MaxFlows int
	// MaxErrorBytes is the most bytes of error messages (v3 last_errors)
	// the state holds over all nodes.
	MaxErrorBytes int
}

// The worker's limits unless configured (--max-nodes, --max-total-flows;
// PROTOCOL.md, "Capacity").
const (
	DefaultMaxNodes      = 10000
	DefaultMaxTotalFlows = 100000
	DefaultMaxErrorBytes = 16 << 20
)

// The names of the limits, as the command line spells them.
const (
	LimitMaxNodes      = "max-nodes"
	LimitMaxTotalFlows = "max-total-flows"
	LimitMaxErrorBytes = "max-error-bytes"
)

// ErrCapacity is wrapped by the error of a report that would take the state
// past one of its Limits. Nothing was changed.
var ErrCapacity = errors.New("flowstate: capacity exceeded")

// CapacityError says which limit a refused report would have passed.
type CapacityError struct {
	Limit string // LimitMaxNodes, LimitMaxTotalFlows or LimitMaxErrorBytes
	Max   int    // the limit
	Would int    // the count the report would have made
}

func (e *CapacityError) Error() string {
	what := "nodes"
	switch e.Limit {
	case LimitMaxTotalFlows:
		what = "flows"
	case LimitMaxErrorBytes:
		what = "bytes of error messages"
	}
	return fmt.Sprintf("report would take the state to %d %s, past --%s %d", e.Would, what, e.Limit, e.Max)
}

// Unwrap returns ErrCapacity.
func (e *CapacityError) Unwrap() error { return ErrCapacity }

// checkErrorBytes refuses a report whose errors, add bytes, would take
// the state's error bytes, total, past max: old are the bytes of the
// report it replaces. A report that does not add any passes.
func checkErrorBytes(total, old, add, max int) error {
	if max <= 0 {
		return nil
	}
	if add <= old || total-old+add <= max {
		return nil
	}
	return &CapacityError{Limit: LimitMaxErrorBytes, Max: max, Would: total - old + add}
}
