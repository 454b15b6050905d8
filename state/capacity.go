package state

import (
	"errors"
	"fmt"

	"github.com/flowstate-io/flowstate/flowstate"
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
	// MaxErrors is the most errors (v3 last_errors) the state holds over
	// all nodes.
	MaxErrors int
}

// The worker's limits unless configured (--max-nodes, --max-total-flows;
// PROTOCOL.md, "Capacity").
const (
	DefaultMaxNodes      = 10000
	DefaultMaxTotalFlows = 100000
	DefaultMaxErrorBytes = 16 << 20
	DefaultMaxErrors     = 100000
)

// The names of the limits, as the command line spells them.
const (
	LimitMaxNodes      = "max-nodes"
	LimitMaxTotalFlows = "max-total-flows"
	LimitMaxErrorBytes = "max-error-bytes"
	LimitMaxErrors     = "max-errors"
)

// ErrCapacity is wrapped by the error of a report that would take the state
// past one of its Limits. Nothing was changed.
var ErrCapacity = errors.New("flowstate: capacity exceeded")

// CapacityError says which limit a refused report would have passed.
type CapacityError struct {
	Limit string // LimitMaxNodes, LimitMaxTotalFlows, LimitMaxErrorBytes or LimitMaxErrors
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
	case LimitMaxErrors:
		what = "errors"
	}
	return fmt.Sprintf("report would take the state to %d %s, past --%s %d", e.Would, what, e.Limit, e.Max)
}

// Unwrap returns ErrCapacity.
func (e *CapacityError) Unwrap() error { return ErrCapacity }

// errorLoad is what a health's errors count against the limits: their
// bytes of messages and their number.
type errorLoad struct {
	bytes, count int
}

// loadOf returns the errors h holds; zero for a nil h.
func loadOf(h *flowstate.Health) errorLoad {
	if h == nil {
		return errorLoad{}
	}
	return errorLoad{bytes: h.ErrorBytes(), count: flowstate.ErrorCount(h.Flows)}
}

func (a errorLoad) plus(b errorLoad) errorLoad {
	return errorLoad{a.bytes + b.bytes, a.count + b.count}
}
func (a errorLoad) minus(b errorLoad) errorLoad {
	return errorLoad{a.bytes - b.bytes, a.count - b.count}
}

// checkErrors refuses a report whose errors, add, would take the state's
// errors, total, past lim's MaxErrorBytes or MaxErrors: old are the
// errors of the report it replaces. A report that adds no bytes (no
// errors) passes that check.
func checkErrors(total, old, add errorLoad, lim Limits) error {
	if err := checkErrorLimit(LimitMaxErrorBytes, total.bytes, old.bytes, add.bytes, lim.MaxErrorBytes); err != nil {
		return err
	}
	return checkErrorLimit(LimitMaxErrors, total.count, old.count, add.count, lim.MaxErrors)
}

// checkErrorLimit refuses add past max, total holding old that add replaces.
func checkErrorLimit(limit string, total, old, add, max int) error {
	if max <= 0 {
		return nil
	}
	if add <= old || total-old+add <= max {
		return nil
	}
	return &CapacityError{Limit: limit, Max: max, Would: total - old + add}
}
