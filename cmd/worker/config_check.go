package main

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/flowstate-io/flowstate/consumer"
)

// jetStreamFlags are the flags of the JetStream backend alone.
var jetStreamFlags = []string{"kv-bucket", "kv-replicas", "kv-storage", "kv-window", "kv-replica-silence"}

// checkMemoryFlags refuses a flag of the JetStream backend given with the
// memory backend, which would ignore it: an operator who sets
// --kv-replicas 3 expects a replicated state, and would get one copy in
// one process.
func (c *Config) checkMemoryFlags() error {
	var set []string
	for _, name := range jetStreamFlags {
		switch by := c.setBy[name]; by {
		case "":
		case "--" + name:
			set = append(set, by)
		default:
			set = append(set, by+" (--"+name+")")
		}
	}
	if len(set) == 0 {
		return nil
	}
	return fmt.Errorf("%s: only --kv jetstream uses it, the memory backend (--kv memory) would ignore it; give --kv jetstream (and --nats-url) for a shared, replicated state, or leave it out",
		strings.Join(set, ", "))
}

// consumerFlags name the flag that sets each field of consumer.Config.
var consumerFlags = map[string]string{
	"DeadLetterSubject": "--dead-letter-subject",
	"FullInterval":      "--full-interval",
	"MaxFlows":          "--max-flows",
	"NodeTTL":           "--node-ttl",
	"PublishInterval":   "--publish-interval",
	"StateUpdates":      "--state-updates",
}

// checkConsumer checks the consumer's settings by its own rules (one place
// for them: consumer.Config.Validate), naming the flag of a field it
// refuses.
func (c *Config) checkConsumer() error {
	err := c.consumerConfig().Validate()
	var invalid *consumer.FieldError
	if errors.As(err, &invalid) {
		if flag, ok := consumerFlags[invalid.Field]; ok {
			return fmt.Errorf("%s %s: %s", flag, invalid.Value, invalid.Reason)
		}
	}
	return err
}

// checkUpdates checks --full-interval against the updates it spaces.
func (c *Config) checkUpdates() error {
	if c.FullInterval <= 0 {
		return nil
	}
	if c.StateUpdates == consumer.StateUpdatesDelta {
		return errors.New("--full-interval spaces full updates, which --state-updates delta does not send; leave one of them out")
	}
	if c.FullInterval < c.PublishInterval {
		return fmt.Errorf("--full-interval %v is shorter than --publish-interval %v: full updates go out with a publish at most; give a longer --full-interval, or leave it out for one with every publish",
			c.FullInterval, c.PublishInterval)
	}
	return nil
}

// flagMention finds the flags an error message names.
var flagMention = regexp.MustCompile(`--([a-z][a-z0-9-]*)`)

// naming adds to err, a complaint about flags, the environment variable
// that set each flag it names and that was not given on the command line,
// so that FLOWSTATE_KV=jetsream is not reported as a --kv nobody typed.
func (f *flagSet) naming(err error) error {
	var from []string
	seen := map[string]bool{}
	for _, m := range flagMention.FindAllStringSubmatch(err.Error(), -1) {
		name := m[1]
		by := f.origin(name)
		if seen[name] || by == "" || by == "--"+name || strings.Contains(err.Error(), by) {
			continue
		}
		seen[name] = true
		from = append(from, "--"+name+" set by "+by)
	}
	if len(from) == 0 {
		return err
	}
	return &namedError{err: err, suffix: " (" + strings.Join(from, ", ") + ")"}
}

// namedError is an error with the origins of its flags appended.
type namedError struct {
	err    error
	suffix string
}

func (e *namedError) Error() string { return e.err.Error() + e.suffix }
func (e *namedError) Unwrap() error { return e.err }
