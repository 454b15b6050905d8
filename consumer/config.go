package consumer

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/flowstate-io/flowstate/protocol"
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
	Logger    *slog.Logger // nil: discard
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
	return c
}

// Validate reports the first invalid field of c.
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
	if err := c.validDeadLetter(); err != nil {
		return err
	}
	if c.NodeTTL < 0 {
		return fmt.Errorf("node TTL %v is negative", c.NodeTTL)
	}
	if c.PublishInterval < 0 {
		return fmt.Errorf("publish interval %v is negative", c.PublishInterval)
	}
	if c.FullInterval < 0 {
		return fmt.Errorf("full update interval %v is negative", c.FullInterval)
	}
	if c.MaxFlows < 0 {
		return fmt.Errorf("max flows %d is negative", c.MaxFlows)
	}
	switch c.StateUpdates {
	case "", StateUpdatesBoth, StateUpdatesFull, StateUpdatesDelta:
	default:
		return fmt.Errorf("state updates %q: want %s, %s or %s", c.StateUpdates, StateUpdatesBoth, StateUpdatesFull, StateUpdatesDelta)
	}
	if c.PendingMsgs < 0 || c.PendingBytes < 0 || c.EndpointPendingMsgs < 0 || c.EndpointPendingBytes < 0 {
		return errors.New("pending limits must not be negative")
	}
	return nil
}

// validDeadLetter refuses a dead-letter subject that the worker consumes or
// publishes: a rejected report sent there would come back to the worker, be
// rejected again and loop forever, or reach the frontends as state.
func (c Config) validDeadLetter() error {
	dl := c.DeadLetterSubject
	if dl == "" {
		return nil
	}
	s := protocol.SubjectsOf(c.Prefix)
	if protocol.Overlaps(s.Heartbeats, dl) {
		return fmt.Errorf("dead-letter subject %q is one the worker consumes (%s): rejected reports would loop", dl, s.Heartbeats)
	}
	for _, own := range []string{s.State, s.Delta, s.Get, s.Nodes} {
		if dl == own {
			return fmt.Errorf("dead-letter subject %q is one the worker publishes or serves", dl)
		}
	}
	return nil
}
