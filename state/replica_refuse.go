package state

import (
	"errors"
	"log/slog"
	"maps"

	"github.com/flowstate-io/flowstate/kv"
)

// ErrTooManyFlows is wrapped by the answer of a report that names more
// flows than ReplicaOptions.MaxReportFlows (--max-flows): refused before
// its write. A value in the store is applied whatever its size: the limit
// is the writer's.
var ErrTooManyFlows = errors.New("state: the report names more flows than --max-flows")

// The reasons of StoreRefusals.
const (
	// RefusedInvalid: a node's value is not a FlowStateValue by serde_json's
	// rules (flowstate.AppendValueFlows); the node is absent.
	RefusedInvalid = "invalid"
	// RefusedKey: a key under the node prefix is not NodeKey of a node (its
	// token is not a canonical decimal uint64); it is ignored.
	RefusedKey = "key"
)

// refusals counts what the watch found that the rule refuses, by reason.
type refusals map[string]uint64

// refuseLocked counts and logs, rate-limited, a node value applied as no
// value or a key ignored.
func (r *Replica) refuseLocked(reason string, ev kv.Event, err error) {
	r.watch.refused[reason]++
	ok, suppressed := r.refuseLog.Allow()
	if !ok {
		return
	}
	attrs := []any{slog.String("key", cut(ev.Key)), slog.Uint64("revision", ev.Revision.Seq), slog.String("reason", reason)}
	if err != nil {
		attrs = append(attrs, slog.String("err", cut(err.Error())))
	}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed", suppressed))
	}
	msg := "a node's value in the store is no value by the rule: the node is absent"
	if reason == RefusedKey {
		msg = "ignoring a key under the node prefix that is no node's"
	}
	r.log.Warn(msg, attrs...)
}

// StoreRefusals counts, by reason (RefusedInvalid, RefusedKey), the node
// values that this worker's watch applied as no value
// and the keys it ignored, since it started.
func (r *Replica) StoreRefusals() map[string]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.watch.refused)
}

// maxEcho bounds what a log line echoes of a key or an error that came
// from the store.
const maxEcho = 200

func cut(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	return s[:maxEcho] + "…"
}
