package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"flowstate/consumer"
	"flowstate/kv/jetstream"
	"flowstate/protocol"
)

// Config is the worker's configuration: PROTOCOL.md's command line.
type Config struct {
	NATSURL         string
	Listen          string
	Prefix          string
	Queue           string
	PublishInterval time.Duration
	MaxFlows        int
	MetricsAddr     string
	MetricsFlows    int // export the N flows with the largest state (0: none)
	KV              string
	KVBucket        string
	KVReplicas      int
	KVStorage       string

	// Authentication with an external server. Secrets come only from the
	// environment, so that they stay out of process listings.
	Creds    string // credentials file
	NKeySeed string // nkey seed file
	User     string // password from FLOWSTATE_NATS_PASSWORD
	Password string
	Token    string // from FLOWSTATE_NATS_TOKEN
	TLSCA    string
	TLSCert  string
	TLSKey   string

	DeadLetterSubject string
	NodeTTL           time.Duration
	LogLevel          string
	StateUpdates      string // both, full or delta (v2)
}

// envPrefix starts every environment variable of the worker.
const envPrefix = "FLOWSTATE_"

// errHelp is returned by parseConfig when --help was asked for.
var errHelp = flag.ErrHelp

// parseConfig parses args over the environment (a flag given wins over its
// variable) and validates the result.
func parseConfig(args []string, getenv func(string) string, usageOut io.Writer) (Config, error) {
	c := Config{
		Listen:          "127.0.0.1:4222",
		Prefix:          protocol.DefaultPrefix,
		Queue:           protocol.DefaultQueue,
		PublishInterval: consumer.DefaultPublishInterval,
		MaxFlows:        consumer.DefaultMaxFlows,
		KV:              "memory",
		KVBucket:        "flow_state",
		KVReplicas:      1,
		KVStorage:       "memory",
		LogLevel:        "info",
		StateUpdates:    consumer.StateUpdatesBoth,
	}
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	str := func(p *string, name, usage string) { fs.StringVar(p, name, *p, usage) }
	str(&c.NATSURL, "nats-url", "connect to this NATS server or cluster (comma-separated URLs); empty: start an embedded server")
	str(&c.Listen, "listen", "where the embedded server listens (port 0: any free port)")
	str(&c.Prefix, "prefix", "subject prefix")
	str(&c.Queue, "queue", "queue group of the heartbeat subscription")
	fs.DurationVar(&c.PublishInterval, "publish-interval", c.PublishInterval, "coalesce state updates and aggregate-key writes (0: after every report)")
	fs.IntVar(&c.MaxFlows, "max-flows", c.MaxFlows, "most flows one report may carry")
	str(&c.MetricsAddr, "metrics-addr", "HTTP address for /metrics, /healthz and /readyz (empty: off)")
	fs.IntVar(&c.MetricsFlows, "metrics-flows", 0, fmt.Sprintf("export per-flow metrics of the N flows with the largest state (0 to %d; 0: off)", maxMetricsFlows))
	str(&c.KV, "kv", "state backend: memory, or jetstream (one state shared by every worker of the queue group)")
	str(&c.KVBucket, "kv-bucket", "JetStream key-value bucket for --kv jetstream, created if missing")
	fs.IntVar(&c.KVReplicas, "kv-replicas", c.KVReplicas, "replicas of the bucket (1 to 5), for --kv jetstream")
	str(&c.KVStorage, "kv-storage", "storage of the bucket for --kv jetstream: memory, or file to survive a NATS restart")
	str(&c.Creds, "nats-creds", "NATS credentials file")
	str(&c.NKeySeed, "nats-nkey", "NATS nkey seed file")
	str(&c.User, "nats-user", "NATS user; the password is read from "+envPrefix+"NATS_PASSWORD")
	str(&c.TLSCA, "tls-ca", "CA certificate file to verify the NATS server")
	str(&c.TLSCert, "tls-cert", "client certificate file for NATS TLS")
	str(&c.TLSKey, "tls-key", "client key file for NATS TLS")
	str(&c.DeadLetterSubject, "dead-letter-subject", "publish rejected reports here, with the reason in headers (empty: off)")
	fs.DurationVar(&c.NodeTTL, "node-ttl", 0, "evict a node silent for longer than this, as if it had sent an empty report (0: never)")
	str(&c.LogLevel, "log-level", "debug, info, warn or error")
	str(&c.StateUpdates, "state-updates", "what each update publishes: both, full (only <prefix>.state) or delta (only <prefix>.state.delta)")
	useTokenEnv := false
	fs.BoolFunc("nats-token", "authenticate with the token in "+envPrefix+"NATS_TOKEN", func(v string) error {
		if v != "true" {
			return fmt.Errorf("the token is read from %sNATS_TOKEN only, to keep it out of process listings", envPrefix)
		}
		useTokenEnv = true
		return nil
	})

	// Environment first, so that flags given on the command line win.
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "nats-token" {
			return
		}
		name := envName(f.Name)
		if v := getenv(name); v != "" && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("invalid value %q for %s: %v", v, name, err)
			}
		}
	})
	if envErr != nil {
		return c, envErr
	}
	// The flag package calls Usage on every parse error and on -help; the
	// usage is printed once, for -help only: an error is one line on stderr.
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(usageOut, fs)
			return c, errHelp
		}
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	c.Password = getenv(envPrefix + "NATS_PASSWORD")
	if tok := getenv(envPrefix + "NATS_TOKEN"); tok != "" || useTokenEnv {
		if tok == "" {
			return c, fmt.Errorf("--nats-token needs the token in %sNATS_TOKEN", envPrefix)
		}
		c.Token = tok
	}
	return c, c.Validate()
}

// envName maps a flag name to its environment variable: nats-url ->
// FLOWSTATE_NATS_URL.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Validate reports the first invalid setting, in one line.
func (c Config) Validate() error {
	if err := c.consumerConfig().Validate(); err != nil {
		return err
	}
	if c.Prefix == "" {
		return errors.New("--prefix must not be empty")
	}
	if c.Queue == "" {
		return errors.New("--queue must not be empty")
	}
	if c.MaxFlows <= 0 {
		return fmt.Errorf("--max-flows %d must be positive", c.MaxFlows)
	}
	if c.NATSURL == "" {
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
	}
	switch c.KV {
	case "memory":
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
	if c.MetricsFlows < 0 || c.MetricsFlows > maxMetricsFlows {
		return fmt.Errorf("--metrics-flows %d: want 0 to %d", c.MetricsFlows, maxMetricsFlows)
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			return fmt.Errorf("--metrics-addr %q: %v", c.MetricsAddr, err)
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if c.Password != "" && c.User == "" {
		return fmt.Errorf("%sNATS_PASSWORD is set but --nats-user is not", envPrefix)
	}
	if c.User != "" && c.Password == "" {
		return fmt.Errorf("--nats-user needs the password in %sNATS_PASSWORD", envPrefix)
	}
	if c.Creds != "" && c.NKeySeed != "" {
		return errors.New("--nats-creds and --nats-nkey are exclusive")
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return err
	}
	for _, f := range []struct{ flag, path string }{
		{"--nats-creds", c.Creds}, {"--nats-nkey", c.NKeySeed},
		{"--tls-ca", c.TLSCA}, {"--tls-cert", c.TLSCert}, {"--tls-key", c.TLSKey},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("%s: %v", f.flag, err)
		}
	}
	return nil
}

// jetStreamConfig is the part of c that configures the JetStream store.
func (c Config) jetStreamConfig() jetstream.Config {
	return jetstream.Config{Bucket: c.KVBucket, Replicas: c.KVReplicas, Storage: c.KVStorage}
}

// consumerConfig is the part of c that configures the consumer.
func (c Config) consumerConfig() consumer.Config {
	return consumer.Config{
		Prefix:            c.Prefix,
		Queue:             c.Queue,
		PublishInterval:   c.PublishInterval,
		MaxFlows:          c.MaxFlows,
		DeadLetterSubject: c.DeadLetterSubject,
		NodeTTL:           c.NodeTTL,
		StateUpdates:      c.StateUpdates,
	}
}
