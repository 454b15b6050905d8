package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/protocol"
	"github.com/flowstate-io/flowstate/state"
)

// errShuttingDown is the error of a request that arrives, or is still
// waiting, once Shutdown has stopped intake.
var errShuttingDown = errors.New("consumer: shutting down")

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

// judge maps an error of applying a report or serving a request to its
// verdict. Only fail calls it.
func judge(err error) verdict {
	var bad *badReport
	var dec *codec.DecodeError
	switch {
	case errors.As(err, &bad):
		return verdict{code: protocol.CodeBadRequest, kind: bad.kind, reason: bad.Error()}
	case errors.As(err, &dec):
		return verdict{code: protocol.CodeBadRequest, kind: string(dec.Kind), reason: dec.Error()}
	case errors.Is(err, state.ErrTooManyFlows):
		// A shared state's own check of --max-flows (the decoder's comes
		// first): the report is refused whole, as the decoder refuses it.
		return verdict{code: protocol.CodeBadRequest, kind: "too_many_flows", reason: err.Error()}
	case errors.Is(err, state.ErrStale):
		// A report delayed past a later one of its process: nothing
		// changed; the reason names both reports.
		return verdict{code: protocol.CodeStale, kind: "stale", reason: err.Error()}
	case errors.Is(err, state.ErrCapacity):
		// The report would take the state past --max-nodes or
		// --max-total-flows: nothing changed; the reason names the limit.
		return verdict{code: protocol.CodeCapacity, kind: "capacity", reason: err.Error()}
	case errors.Is(err, errTooLarge), errors.Is(err, nats.ErrMaxPayload):
		return verdict{code: protocol.CodeTooLarge, kind: "too_large", reason: err.Error()}
	case errors.Is(err, errShuttingDown), errors.Is(err, context.Canceled):
		// Handlers run under the base context, which only Shutdown cancels.
		return verdict{code: protocol.CodeUnavailable, kind: "shutting_down", reason: "the worker is shutting down"}
	case errors.Is(err, state.ErrStoreCleared):
		return verdict{code: protocol.CodeUnavailable, kind: "store", reason: err.Error()}
	case errors.Is(err, kv.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		// A shared store that cannot take writes: nothing was acked, the
		// flownode's next report (or retry) is applied once it is back.
		return verdict{code: protocol.CodeUnavailable, kind: "unavailable", reason: err.Error()}
	default:
		return verdict{code: protocol.CodeInternal, kind: "store", reason: err.Error()}
	}
}

// Endpoints, as fail counts them.
const (
	endpointHeartbeat = "heartbeat"
	endpointGet       = "get"
	endpointNodes     = "nodes"
)

// logMessage is the message of fail's log line, per endpoint.
var logMessage = map[string]string{
	endpointHeartbeat: "report rejected",
	endpointGet:       "get failed",
	endpointNodes:     "nodes request failed",
}

// failure is an error at the NATS edge and where it happened.
type failure struct {
	endpoint string // endpointHeartbeat, endpointGet or endpointNodes
	subject  string // the request's subject, echoed cut (cutToken)
	nodeID   uint64 // the report's node, if hasNode
	hasNode  bool
	err      error
	// respond sends the error reply with the service error headers; nil
	// when no reply is wanted (a report published without a reply subject).
	respond func(code int, reason string) error
}

// fail is the one place where an error at the NATS edge becomes a reply
// code, an error reply with the service error headers, a counted reason
// and one log line with fixed keys (subject, node_id, reason, code, err),
// rate-limited since a remote peer triggers it. A failed reply
// (micro.ErrRespond) is only counted and logged. It returns the verdict.
func (w *Worker) fail(f failure) verdict {
	v := judge(f.err)
	if errors.Is(f.err, micro.ErrRespond) {
		v = verdict{code: 0, kind: "respond", reason: f.err.Error()}
	}
	if f.endpoint == endpointHeartbeat {
		w.stats.reject(v.kind)
	} else {
		w.stats.requestError(f.endpoint, v.kind)
	}
	level := slog.LevelWarn
	if v.code >= protocol.CodeInternal && v.code != protocol.CodeCapacity {
		level = slog.LevelError
	}
	attrs := []any{slog.String("subject", cutToken(f.subject))}
	if f.hasNode {
		attrs = append(attrs, slog.Uint64("node_id", f.nodeID))
	}
	attrs = append(attrs, slog.String("reason", v.kind), slog.Int("code", v.code), slog.String("err", cutReason(v.reason)))
	if v.code != 0 && f.respond != nil {
		if err := f.respond(v.code, cutReason(v.reason)); err != nil {
			attrs = append(attrs, slog.String("reply_err", err.Error()))
		}
	}
	w.logThrottled(level, logMessage[f.endpoint], attrs...)
	return v
}

// failRequest answers a micro request (get, nodes) that failed: the
// function that get.go and nodes.go call with whatever error they have.
func (w *Worker) failRequest(endpoint string, req micro.Request, err error) verdict {
	return w.fail(failure{endpoint: endpoint, subject: req.Subject(), err: err,
		respond: func(code int, reason string) error { return req.Error(strconv.Itoa(code), reason, nil) }})
}

// failReport answers a heartbeat that was not applied.
func (w *Worker) failReport(msg *nats.Msg, nodeID uint64, hasNode bool, err error) verdict {
	f := failure{endpoint: endpointHeartbeat, subject: msg.Subject, nodeID: nodeID, hasNode: hasNode, err: err}
	if msg.Reply != "" {
		f.respond = func(code int, reason string) error {
			return msg.RespondMsg(&nats.Msg{Header: errorHeader(code, reason)})
		}
	}
	return w.fail(f)
}
