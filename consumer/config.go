package consumer

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Defaults of Config, as PROTOCOL.md's command line sets them.
const (
	DefaultPrefix          = "flow"
	DefaultQueue           = "flowstate"
	DefaultPublishInterval = 100 * time.Millisecond
	DefaultMaxFlows        = 100000
	// DefaultPendingMsgs and DefaultPendingBytes bound what the client
	// library buffers for the heartbeat subscription. Past them it drops
	// messages (a slow consumer) instead of blocking the connection; each
	// node's next report heals the state.
	DefaultPendingMsgs  = 1 << 20
	DefaultPendingBytes = 64 << 20
)

// ServiceName is the NATS micro service name the worker registers.
const ServiceName = "flowstate"

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
	Version         string        // reported by $SRV.INFO; "0.0.0" if empty
	// DeadLetterSubject, if set, receives every rejected report's body with
	// the reason in headers (see the Header* constants). Empty: off.
	DeadLetterSubject string
	// NodeTTL, if positive, evicts a node silent for longer than that, as if
	// it had sent an empty report. 0: nodes stay until they report again.
	NodeTTL time.Duration
	// OnApplied, if set, is called with the time each applied report took
	// (decode, checks, merge), for metrics.
	OnApplied func(time.Duration)
	Logger    *slog.Logger // nil: discard
}

// withDefaults returns c with its empty fields set.
func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Queue == "" {
		c.Queue = DefaultQueue
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
	if err := validToken("prefix", c.Prefix, true); err != nil {
		return err
	}
	if err := validToken("queue", c.Queue, false); err != nil {
		return err
	}
	if err := validToken("dead-letter subject", c.DeadLetterSubject, true); err != nil {
		return err
	}
	if c.NodeTTL < 0 {
		return fmt.Errorf("node TTL %v is negative", c.NodeTTL)
	}
	if c.PublishInterval < 0 {
		return fmt.Errorf("publish interval %v is negative", c.PublishInterval)
	}
	if c.MaxFlows < 0 {
		return fmt.Errorf("max flows %d is negative", c.MaxFlows)
	}
	if c.PendingMsgs < 0 || c.PendingBytes < 0 {
		return errors.New("pending limits must not be negative")
	}
	return nil
}

// validToken checks a subject prefix (dots allowed between tokens) or a
// queue group name.
func validToken(what, s string, dots bool) error {
	if s == "" {
		return nil // default
	}
	if strings.ContainsAny(s, " \t\r\n*>") {
		return fmt.Errorf("%s %q contains whitespace or a wildcard", what, s)
	}
	if !dots && strings.Contains(s, ".") {
		return fmt.Errorf("%s %q contains a dot", what, s)
	}
	if dots && (strings.HasPrefix(s, ".") || strings.HasSuffix(s, ".") || strings.Contains(s, "..")) {
		return fmt.Errorf("%s %q has an empty token", what, s)
	}
	return nil
}
