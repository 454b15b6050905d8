package jetstream

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/flowstate-io/flowstate/internal/clock"
	"github.com/flowstate-io/flowstate/kv"
)

// Defaults of Config.
const (
	DefaultEpochKey      = "__flow/epoch"
	DefaultProbeKey      = "__flow/probe"
	DefaultOpTimeout     = 2 * time.Second
	DefaultCheckInterval = time.Second
	DefaultHeartbeat     = time.Second
	DefaultProbeInterval = 250 * time.Millisecond
)

// ErrIncompatibleBucket is wrapped by the error of Open when the
// bucket exists with settings other than those asked for.
var ErrIncompatibleBucket = errors.New("jetstream: the bucket exists with other settings")

// Config configures a JetStream store. Zero values take the
// defaults.
type Config struct {
	Bucket   string // required: the key-value bucket
	Replicas int    // replicas of a bucket created by the store; 0: 1
	Storage  string // "memory" (the default) or "file", for a created bucket
	// EpochKey holds the bucket's epoch; DefaultEpochKey if empty. The store
	// reserves it: writes to it are refused.
	EpochKey string
	// ProbeKey is where the store writes a deletion to find out whether
	// JetStream takes writes again; DefaultProbeKey if empty. Reserved too.
	ProbeKey string
	// OpTimeout bounds every request to JetStream; DefaultOpTimeout if 0.
	OpTimeout time.Duration
	// CheckInterval is how often a Watch reads the epoch key, to notice a
	// wiped or recreated bucket (a stream purge is silent to watchers);
	// DefaultCheckInterval if 0.
	CheckInterval time.Duration
	// Heartbeat paces a Watch's liveness: a watch that has delivered
	// nothing for three heartbeats while a write the store saw stored is
	// ahead of it starts over with a new consumer; its consumer's idle
	// heartbeats are 15 of them apart, and the server keeps the consumer
	// for 60 of them with no one listening, so that it outlasts a
	// partition (watch.go); DefaultHeartbeat if 0.
	Heartbeat time.Duration
	// ProbeInterval is how often the store checks whether JetStream is back
	// after a write found it unavailable; DefaultProbeInterval if 0.
	ProbeInterval time.Duration
	// Window is how many puts PutAsync keeps in flight; kv.DefaultWindow
	// if 0.
	Window int
	// ReplicaSilence is how long the stream's leader may not hear from a
	// replica before WatchReplicas deems its server stuck;
	// DefaultReplicaSilence if 0.
	ReplicaSilence time.Duration
	// Clock is the process's clock: OpTimeout, CheckInterval and
	// ProbeInterval are measured on it, and the deadlines of the puts in
	// flight; clock.Real if nil. The client library's own waits (its
	// default request timeout, pings, reconnects, a watch's idle
	// heartbeats) stay on real time.
	Clock  clock.Clock
	Logger *slog.Logger // nil: discard
}

func (c Config) withDefaults() Config {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Storage == "" {
		c.Storage = "memory"
	}
	if c.EpochKey == "" {
		c.EpochKey = DefaultEpochKey
	}
	if c.ProbeKey == "" {
		c.ProbeKey = DefaultProbeKey
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = DefaultOpTimeout
	}
	if c.CheckInterval == 0 {
		c.CheckInterval = DefaultCheckInterval
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = DefaultProbeInterval
	}
	if c.Window == 0 {
		c.Window = kv.DefaultWindow
	}
	if c.ReplicaSilence == 0 {
		c.ReplicaSilence = DefaultReplicaSilence
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = clock.Real
	}
	return c
}

var validBucket = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// Validate reports the first invalid field of c.
func (c Config) Validate() error {
	switch {
	case !validBucket.MatchString(c.Bucket):
		return fmt.Errorf("bucket %q: want letters, digits, '_' and '-' only", c.Bucket)
	case c.Replicas < 0 || c.Replicas > 5:
		return fmt.Errorf("replicas %d: want 1 to 5", c.Replicas)
	case c.Storage != "" && c.Storage != "memory" && c.Storage != "file":
		return fmt.Errorf("storage %q: want memory or file", c.Storage)
	case c.EpochKey != "" && !validKey(c.EpochKey):
		return fmt.Errorf("epoch key %q is not a valid key", c.EpochKey)
	case c.ProbeKey != "" && !validKey(c.ProbeKey):
		return fmt.Errorf("probe key %q is not a valid key", c.ProbeKey)
	case c.Window < 0:
		return fmt.Errorf("window %d: want a positive number of puts in flight", c.Window)
	case c.OpTimeout < 0 || c.CheckInterval < 0 || c.Heartbeat < 0 || c.ProbeInterval < 0 || c.ReplicaSilence < 0:
		return errors.New("durations must not be negative")
	}
	return nil
}

func (c Config) storageType() natsjs.StorageType {
	if c.Storage == "file" {
		return natsjs.FileStorage
	}
	return natsjs.MemoryStorage
}
