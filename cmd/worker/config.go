package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/kv"
	"github.com/flowstate-io/flowstate/kv/jetstream"
	"github.com/flowstate-io/flowstate/protocol"
	"github.com/flowstate-io/flowstate/state"
)

// Config is the worker's configuration: PROTOCOL.md's command line.
type Config struct {
	NATSURL         string
	Listen          string
	ListenInsecure  bool // a non-loopback --listen, knowing it has no authentication
	Prefix          string
	Queue           string
	PublishInterval time.Duration
	FullInterval    time.Duration // --full-interval: spacing of full updates; 0: every publish
	MaxFlows        int
	MaxNodes        int    // --max-nodes: most nodes the state holds
	MaxTotalFlows   int    // --max-total-flows: most distinct flows the aggregate holds
	MaxErrorBytes   int    // --max-error-bytes: most bytes of error messages the state holds
	MaxErrors       int    // --max-errors: most errors the state holds
	StateUpdates    string // --state-updates: both, full or delta
	MetricsAddr     string
	MetricsFlows    int  // --metrics-flows: per-flow metrics of the N largest flows, the N with the most rows and the N with the newest errors
	PProf           bool // --pprof: serve /debug/pprof/ on the metrics address
	KV              string
	KVBucket        string
	KVReplicas      int
	KVStorage       string
	KVWindow        int // --kv-window: JetStream writes in flight
	// KVReplicaSilence (--kv-replica-silence): how long a replica of the
	// bucket may go unheard by the stream's leader before its server is
	// reported as needing a restart.
	KVReplicaSilence time.Duration

	Auth // authentication with an external server

	DeadLetterSubject string
	NodeTTL           time.Duration
	LogLevel          string

	// urlSecrets are the --nats-url entries that carry credentials,
	// redacted, to be warned about.
	urlSecrets []string
	// setBy names, for each flag set, where its value came from: "--name",
	// or its environment variable.
	setBy map[string]string
	// showVersion is --version: print the build information instead of
	// running.
	showVersion bool
}

// defaultListen is where the embedded server listens by default, and so
// where the subcommands look for NATS (defaultCLIURL).
const defaultListen = "127.0.0.1:4222"

// defaultConfig is the configuration with no flag and no variable set.
func defaultConfig() Config {
	return Config{
		Listen:           defaultListen,
		Prefix:           protocol.DefaultPrefix,
		Queue:            protocol.DefaultQueue,
		PublishInterval:  consumer.DefaultPublishInterval,
		MaxFlows:         consumer.DefaultMaxFlows,
		MaxNodes:         state.DefaultMaxNodes,
		MaxTotalFlows:    state.DefaultMaxTotalFlows,
		MaxErrorBytes:    state.DefaultMaxErrorBytes,
		MaxErrors:        state.DefaultMaxErrors,
		StateUpdates:     consumer.StateUpdatesBoth,
		KV:               "memory",
		KVBucket:         "flow_state",
		KVReplicas:       1,
		KVStorage:        "memory",
		KVWindow:         kv.DefaultWindow,
		KVReplicaSilence: jetstream.DefaultReplicaSilence,
		LogLevel:         "info",
	}
}

// daemonFlags defines the worker's flags over c.
func daemonFlags(c *Config) *flagSet {
	f := newFlagSet("worker")
	str := func(p *string, name, usage string) { f.StringVar(p, name, *p, usage) }
	str(&c.NATSURL, "nats-url", "connect to this NATS server or cluster (comma-separated `URL`s); empty: start an embedded server")
	str(&c.Listen, "listen", "where the embedded server listens, `host:port` on loopback (port 0: any free port)")
	f.BoolVar(&c.ListenInsecure, "listen-insecure", false, "allow a non-loopback --listen: the embedded server has no authentication")
	str(&c.Prefix, "prefix", "subject `prefix`")
	str(&c.Queue, "queue", "queue `group` of the heartbeat subscription")
	f.DurationVar(&c.PublishInterval, "publish-interval", c.PublishInterval, "coalesce state updates and aggregate-key writes (0: after every report)")
	f.DurationVar(&c.FullInterval, "full-interval", 0, "send full updates on <prefix>.state at most once per `duration`, deltas keeping --publish-interval (0: with every publish)")
	f.IntVar(&c.MaxFlows, "max-flows", c.MaxFlows, "at most `n` flows in one report")
	f.IntVar(&c.MaxNodes, "max-nodes", c.MaxNodes, "at most `n` nodes in the state; a report past it is rejected (507)")
	f.IntVar(&c.MaxTotalFlows, "max-total-flows", c.MaxTotalFlows, "at most `n` distinct flows in the aggregate; a report past it is rejected (507)")
	f.IntVar(&c.MaxErrorBytes, "max-error-bytes", c.MaxErrorBytes, "at most `n` bytes of error messages (v3 last_errors) in the state over all nodes; a report past it is rejected (507)")
	f.IntVar(&c.MaxErrors, "max-errors", c.MaxErrors, "at most `n` errors (v3 last_errors) in the state over all nodes; a report past it is rejected (507)")
	str(&c.StateUpdates, "state-updates", "state updates to publish, `mode` both, full or delta")
	str(&c.MetricsAddr, "metrics-addr", "HTTP `address` for /metrics, /healthz and /readyz, e.g. 127.0.0.1:9090 (empty: off)")
	f.IntVar(&c.MetricsFlows, "metrics-flows", 0, "per-flow metrics for the `N` flows with the largest state, the N with the most processed rows and the N with the newest errors (0: none)")
	f.BoolVar(&c.PProf, "pprof", false, "serve Go's /debug/pprof/ profiles on --metrics-addr")
	str(&c.KV, "kv", "state `backend`: memory, or jetstream (one state shared by every worker of the queue group)")
	str(&c.KVBucket, "kv-bucket", "JetStream key-value `bucket` for --kv jetstream, created if missing")
	f.IntVar(&c.KVReplicas, "kv-replicas", c.KVReplicas, "replicas of the bucket, `n` from 1 to 5, for --kv jetstream")
	str(&c.KVStorage, "kv-storage", "`storage` of the bucket for --kv jetstream: memory, or file to survive a NATS restart")
	f.IntVar(&c.KVWindow, "kv-window", c.KVWindow, "at most `n` JetStream writes in flight, for --kv jetstream")
	f.DurationVar(&c.KVReplicaSilence, "kv-replica-silence", c.KVReplicaSilence, "report a server of the bucket as needing a restart once the stream's leader has not heard from its replica for this `duration`, for --kv jetstream")
	str(&c.DeadLetterSubject, "dead-letter-subject", "publish rejected reports to this `subject`, with the reason in headers (empty: off)")
	f.DurationVar(&c.NodeTTL, "node-ttl", 0, "evict a node silent for longer than this, as if it had sent an empty report (0: never)")
	str(&c.LogLevel, "log-level", "log `level`: debug, info, warn or error")
	f.VisitAll(func(fl *flag.Flag) { f.withEnv(fl.Name) })
	c.Auth.register(f)
	f.BoolVar(&c.showVersion, "version", false, "print the version, the commit and the Go version, and exit")
	return f
}

// parseConfig parses args over the environment (a flag given wins over its
// variable) and validates the result. It returns errHelp after --help, with
// the usage written to usageOut.
func parseConfig(args []string, getenv func(string) string, usageOut io.Writer) (Config, error) {
	c := defaultConfig()
	f := daemonFlags(&c)
	if err := f.parse(args, getenv); err != nil {
		if errors.Is(err, errHelp) {
			printUsage(usageOut, f)
		}
		return c, err
	}
	if c.showVersion {
		readBuildInfo().print(usageOut)
		return c, errVersion
	}
	c.setBy = f.origins
	if err := c.Auth.resolve(getenv); err != nil {
		return c, f.naming(err)
	}
	if err := c.Validate(); err != nil {
		return c, &usageError{f.naming(err)}
	}
	return c, nil
}

// Validate reports the first invalid setting, in one line.
func (c *Config) Validate() error {
	if c.Prefix == "" {
		return errors.New("--prefix must not be empty")
	}
	if c.Queue == "" {
		return errors.New("--queue must not be empty")
	}
	for _, n := range []struct {
		flag string
		v    int
	}{{"--max-flows", c.MaxFlows}, {"--max-nodes", c.MaxNodes}, {"--max-total-flows", c.MaxTotalFlows}, {"--max-error-bytes", c.MaxErrorBytes}, {"--max-errors", c.MaxErrors}, {"--kv-window", c.KVWindow}} {
		if n.v <= 0 {
			return fmt.Errorf("%s %d must be positive", n.flag, n.v)
		}
	}
	if c.KVReplicaSilence <= 0 {
		return fmt.Errorf("--kv-replica-silence %v must be positive, for example 30s", c.KVReplicaSilence)
	}
	if c.MetricsFlows < 0 || c.MetricsFlows > maxMetricsFlows {
		return fmt.Errorf("--metrics-flows %d: want 0 to %d", c.MetricsFlows, maxMetricsFlows)
	}
	if err := c.checkConsumer(); err != nil {
		return err
	}
	if c.NATSURL == "" {
		if err := c.checkEmbedded(); err != nil {
			return err
		}
	} else {
		secrets, err := checkNATSURL(c.NATSURL)
		if err != nil {
			return err
		}
		c.urlSecrets = secrets
	}
	if err := c.checkUpdates(); err != nil {
		return err
	}
	switch c.KV {
	case "memory":
		if err := c.checkMemoryFlags(); err != nil {
			return err
		}
	case "jetstream":
		if c.NATSURL == "" {
			return errors.New("--kv jetstream needs --nats-url: a NATS server with JetStream (the embedded server has none)")
		}
		if err := c.jetStreamConfig().Validate(); err != nil {
			return fmt.Errorf("--kv jetstream: %v (see --kv-bucket, --kv-replicas, --kv-storage)", err)
		}
		if c.KVReplicas < 1 {
			return fmt.Errorf("--kv-replicas %d: want 1 to 5", c.KVReplicas)
		}
	default:
		return fmt.Errorf("--kv %q: want memory or jetstream", c.KV)
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			return fmt.Errorf("--metrics-addr %q: %v", c.MetricsAddr, err)
		}
	} else if c.PProf || c.MetricsFlows > 0 {
		return errors.New("--pprof and --metrics-flows need --metrics-addr")
	}
	_, err := parseLevel(c.LogLevel)
	return err
}

// checkEmbedded checks the settings of the embedded server: --listen is a
// loopback address unless --listen-insecure, and no authentication flag is
// given, since the embedded server has no authentication.
func (c *Config) checkEmbedded() error {
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %v", c.Listen, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("--listen %q: port %q is not a number from 0 to 65535", c.Listen, port)
	}
	if host != "" && host != "localhost" && net.ParseIP(host) == nil {
		return fmt.Errorf("--listen %q: host %q is not an IP address", c.Listen, host)
	}
	if !loopback(host) && !c.ListenInsecure {
		return fmt.Errorf("--listen %q is not a loopback address: the embedded server has no authentication, so any client that reaches it can take reports and forge acks; give --listen-insecure to accept that, or run an external NATS server with --nats-url", c.Listen)
	}
	if set := c.Auth.flags(); len(set) > 0 {
		return fmt.Errorf("%s given without --nats-url: the embedded server has no authentication; give --nats-url to use an external server", strings.Join(set, ", "))
	}
	return nil
}

// loopback reports whether host (of a listen address) is on loopback only.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// limits are the state's capacity limits.
func (c *Config) limits() state.Limits {
	return state.Limits{MaxNodes: c.MaxNodes, MaxFlows: c.MaxTotalFlows, MaxErrorBytes: c.MaxErrorBytes, MaxErrors: c.MaxErrors}
}

// jetStreamConfig is the part of c that configures the JetStream store.
func (c *Config) jetStreamConfig() jetstream.Config {
	return jetstream.Config{Bucket: c.KVBucket, Replicas: c.KVReplicas, Storage: c.KVStorage, Window: c.KVWindow,
		ReplicaSilence: c.KVReplicaSilence}
}

// consumerConfig is the part of c that configures the consumer.
func (c *Config) consumerConfig() consumer.Config {
	return consumer.Config{
		Prefix:            c.Prefix,
		Queue:             c.Queue,
		PublishInterval:   c.PublishInterval,
		FullInterval:      c.FullInterval,
		MaxFlows:          c.MaxFlows,
		DeadLetterSubject: c.DeadLetterSubject,
		NodeTTL:           c.NodeTTL,
		StateUpdates:      c.StateUpdates,
	}
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}
