package consumer

import (
	"errors"
	"fmt"

	"flowstate/codec"
	"flowstate/flowstate"
	"flowstate/kv"
)

// badReport is a report rejected by the worker itself, after it decoded.
type badReport struct {
	kind   string // counted reason
	field  string
	reason string
}

func (e *badReport) Error() string { return fmt.Sprintf("%s: %s", e.field, e.reason) }

// verdict is what an error becomes: a reply code, a counted reason and a
// one-line description.
type verdict struct {
	code   int
	kind   string
	reason string
}

// judge maps an error of applying a report or serving a get to its verdict.
// It is the one place that decides what an error becomes.
func judge(err error) verdict {
	var bad *badReport
	var dec *codec.DecodeError
	switch {
	case errors.As(err, &bad):
		return verdict{code: 400, kind: bad.kind, reason: bad.Error()}
	case errors.As(err, &dec):
		return verdict{code: 400, kind: string(dec.Kind), reason: dec.Error()}
	case errors.Is(err, flowstate.ErrStoreCleared):
		return verdict{code: 503, kind: "store", reason: err.Error()}
	case errors.Is(err, kv.ErrUnavailable):
		// A shared store that cannot take writes: nothing was acked, the
		// flownode's next report (or retry) is applied once it is back.
		return verdict{code: 503, kind: "unavailable", reason: err.Error()}
	default:
		return verdict{code: 500, kind: "store", reason: err.Error()}
	}
}
