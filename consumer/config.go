package consumer

import (
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/flowstate-io/flowstate/internal/clock"
	"github.com/flowstate-io/flowstate/protocol"
	"github.com/flowstate-io/flowstate/state"
)

// Defaults of Config, as PROTOCOL.md's command line sets them.
const (
	DefaultPublishInterval = 100 * time.Millisecond
	DefaultMaxFlows        = 100000
	// DefaultPendingMsgs and DefaultPendingBytes bound what the client
	// library buffers for the heartbeat subscription. Past them it drops
	// messages (a slow consumer) instead of blocking the connection; each
	// node's next report heals the state.
	DefaultPendingMsgs  = 1 << 20
	DefaultPendingBytes = 64 << 20
	// DefaultEndpointPendingMsgs and DefaultEndpointPendingBytes bound the
	// queue of each micro endpoint (get, nodes): a flood of requests past
	// them is dropped and counted (Stats.EndpointOverflows) instead of
	// queued for seconds, so a legitimate request after the flood waits
	// for at most this many before it.
	DefaultEndpointPendingMsgs  = 256
	DefaultEndpointPendingBytes = 4 << 20
	// DefaultUnansweredLimit is how long a report may wait for its answer
	// before the worker is not ready: a shared state answers every report
	// within its apply timeout (state.DefaultApplyTimeout), and the margin
	// covers a worker slowed down, not one that stopped answering.
	DefaultUnansweredLimit = state.DefaultApplyTimeout + 5*time.Second
)

// The values of Config.StateUpdates (--state-updates).
const (
	StateUpdatesBoth  = "both"  // <prefix>.state and <prefix>.state.delta
	StateUpdatesFull  = "full"  // <prefix>.state only
	StateUpdatesDelta = "delta" // <prefix>.state.delta only
)

// Config configures a Worker. Empty strings and zero limits take the
// defaults above; PublishInterval 0 means publish after every report that
// changed the aggregate (use DefaultPublishInterval for the default).
type Config struct {
	Prefix          string        // subject prefix
	Queue           string        // queue group of the heartbeat subscription
	PublishInterval time.Duration // coalescing interval of <prefix>.state updates
	MaxFlows        int           // most distinct flows one report may name
	PendingMsgs     int           // pending message limit of the heartbeat subscription
	PendingBytes    int           // pending byte limit of the heartbeat subscription
	// EndpointPendingMsgs and EndpointPendingBytes are the pending limits
	// of each micro endpoint's subscription (get, nodes).
	EndpointPendingMsgs  int
	EndpointPendingBytes int
	Version              string // reported by $SRV.INFO; "0.0.0" if empty
	// DeadLetterSubject, if set, receives every rejected report's body with
	// the reason in headers (protocol.HeaderReject*). Empty: off. It must
	// not be a subject the worker consumes or publishes (Validate).
	DeadLetterSubject string
	// NodeTTL, if positive, evicts a node silent for longer than that, as if
	// it had sent an empty report. 0: nodes stay until they report again.
	NodeTTL time.Duration
	// FullInterval spaces the full updates on <prefix>.state: at most one per
	// FullInterval, the last change always sent in full once it is due.
	// Deltas and the aggregate key's writes keep PublishInterval. 0, or a
	// value no longer than PublishInterval: a full update with every
	// publish.
	FullInterval time.Duration
	// Metadata is added to the micro service's metadata in $SRV.INFO (the
	// worker's own keys, such as "prefix", win).
	Metadata map[string]string
	// StateUpdates chooses what is published at each update: StateUpdatesBoth
	// ("" too), StateUpdatesFull (only <prefix>.state) or StateUpdatesDelta
	// (only <prefix>.state.delta).
	StateUpdates string
	// OnApplied, if set, is called with the time each applied report took
	// (decode, checks, merge), for metrics.
	OnApplied func(time.Duration)
	// UnansweredLimit is how long a report taken may wait for its answer:
	// past it, Ready says why the worker is not ready. It is measured on
	// Clock, as the shared state's apply timeout is. DefaultUnansweredLimit
	// if 0.
	UnansweredLimit time.Duration
	// Clock is the worker's clock: the publisher's intervals (PublishInterval,
	// FullInterval), the eviction's ticks and cutoff (NodeTTL) and the age of
	// the reports waiting for their answers are measured on it; clock.Real
	// if nil. Shutdown budgets, log rate limits
	// and OnApplied's durations stay on real time.
	Clock  clock.Clock
	Logger *slog.Logger // nil: discard
}

// withDefaults returns c with its empty fields set.
func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = protocol.DefaultPrefix
	}
	if c.Queue == "" {
		c.Queue = protocol.DefaultQueue
	}
	if c.MaxFlows == 0 {
		c.MaxFlows = DefaultMaxFlows
	}
	if c.PendingMsgs == 0 {
		c.PendingMsgs = DefaultPendingMsgs
	}
	if c.PendingBytes == 0 {
		c.PendingBytes = DefaultPendingBytes
	}
	if c.EndpointPendingMsgs == 0 {
		c.EndpointPendingMsgs = DefaultEndpointPendingMsgs
	}
	if c.EndpointPendingBytes == 0 {
		c.EndpointPendingBytes = DefaultEndpointPendingBytes
	}
	if c.StateUpdates == "" {
		c.StateUpdates = StateUpdatesBoth
	}
	if c.Version == "" {
		c.Version = "0.0.0"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = clock.Real
	}
	if c.UnansweredLimit == 0 {
		c.UnansweredLimit = DefaultUnansweredLimit
	}
	return c
}

// FieldError is an invalid field of Config, as Validate finds it: the
// field's name in Config, its value and why it is refused. A command line
// names the flag that set the field instead.
type FieldError struct {
	Field  string // such as "StateUpdates"
	Value  string // the field's value, quoted if a string
	Reason string // such as "want both, full or delta"
}

func (e *FieldError) Error() string { return e.Field + " " + e.Value + ": " + e.Reason }

func invalid(field string, value any, reason string) error {
	v := fmt.Sprint(value)
	if s, ok := value.(string); ok {
		v = strconv.Quote(s)
	}
	return &FieldError{Field: field, Value: v, Reason: reason}
}

// Validate reports the first invalid field of c: an error of package
// protocol for a prefix, a queue or a subject that is not one, and a
// *FieldError for the rest.
func (c Config) Validate() error {
	if err := protocol.ValidatePrefix(c.Prefix); err != nil {
		return err
	}
	if err := protocol.ValidateQueue(c.Queue); err != nil {
		return err
	}
	if err := protocol.ValidateSubject("dead-letter subject", c.DeadLetterSubject); err != nil {
		return err
	}
	if used := protocol.SubjectsOf(c.Prefix).Used(c.DeadLetterSubject); c.DeadLetterSubject != "" && used != "" {
		// A rejected report sent there would come back to the worker, be
		// rejected again and loop for ever, or reach the frontends as state.
		return invalid("DeadLetterSubject", c.DeadLetterSubject, "the worker uses it ("+used+"), so a rejected report would loop")
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"NodeTTL", c.NodeTTL}, {"PublishInterval", c.PublishInterval}, {"FullInterval", c.FullInterval}, {"UnansweredLimit", c.UnansweredLimit}} {
		if d.v < 0 {
			return invalid(d.field, d.v, "must not be negative")
		}
	}
	if c.MaxFlows < 0 {
		return invalid("MaxFlows", c.MaxFlows, "must not be negative")
	}
	switch c.StateUpdates {
	case "", StateUpdatesBoth, StateUpdatesFull, StateUpdatesDelta:
	default:
		return invalid("StateUpdates", c.StateUpdates, "want "+StateUpdatesBoth+", "+StateUpdatesFull+" or "+StateUpdatesDelta)
	}
	for _, n := range []struct {
		field string
		v     int
	}{{"PendingMsgs", c.PendingMsgs}, {"PendingBytes", c.PendingBytes}, {"EndpointPendingMsgs", c.EndpointPendingMsgs}, {"EndpointPendingBytes", c.EndpointPendingBytes}} {
		if n.v < 0 {
			return invalid(n.field, n.v, "must not be negative")
		}
	}
	return nil
}
