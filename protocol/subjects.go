package protocol

import (
	"fmt"
	"strconv"
	"strings"
)

// Defaults of the command line.
const (
	DefaultPrefix = "flow"      // --prefix
	DefaultQueue  = "flowstate" // --queue
)

// ServiceName is the NATS micro service name the worker registers.
const ServiceName = "flowstate"

// Subjects are the subjects of one prefix.
type Subjects struct {
	Heartbeats      string // <prefix>.heartbeat.* (the worker's subscription)
	HeartbeatPrefix string // <prefix>.heartbeat. (a node's subject is this and its id)
	State           string // <prefix>.state: full updates
	Delta           string // <prefix>.state.delta: delta updates (v2)
	Get             string // <prefix>.state.get: request-reply snapshots
	Nodes           string // <prefix>.state.nodes: the per-node view
}

// SubjectsOf returns the subjects of prefix; "" means DefaultPrefix. It does
// not validate prefix (ValidatePrefix does).
func SubjectsOf(prefix string) Subjects {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return Subjects{
		Heartbeats:      prefix + ".heartbeat.*",
		HeartbeatPrefix: prefix + ".heartbeat.",
		State:           prefix + ".state",
		Delta:           prefix + ".state.delta",
		Get:             prefix + ".state.get",
		Nodes:           prefix + ".state.nodes",
	}
}

// ServiceSubjects matches the subjects of every NATS micro service
// ($SRV.PING, $SRV.INFO and $SRV.STATS, alone or with a name and an id),
// which the worker answers.
const ServiceSubjects = "$SRV.>"

// Used returns the subject, or the pattern, of the worker of these subjects
// that subject falls on: one it consumes (Heartbeats), publishes (State,
// Delta) or serves (Get, Nodes, ServiceSubjects); "" if none. A subject the
// worker sends anything else to, such as a dead-letter subject, must be
// none of them: what it sends would come back to it, for ever, or reach
// the frontends as state.
func (s Subjects) Used(subject string) string {
	for _, used := range []string{s.Heartbeats, s.State, s.Delta, s.Get, s.Nodes, ServiceSubjects} {
		if Overlaps(used, subject) {
			return used
		}
	}
	return ""
}

// Heartbeat returns the subject node nodeID reports on.
func (s Subjects) Heartbeat(nodeID uint64) string {
	return s.HeartbeatPrefix + strconv.FormatUint(nodeID, 10)
}

// ParseNodeToken parses the node id token of a heartbeat subject: canonical
// decimal, no sign, no leading zeros, within uint64.
func ParseNodeToken(s string) (uint64, bool) {
	if s == "" || len(s) > 20 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	id, err := strconv.ParseUint(s, 10, 64)
	return id, err == nil
}

// ValidatePrefix checks a subject prefix: "" (the default) or one or more
// dot-separated tokens without whitespace or wildcards.
func ValidatePrefix(prefix string) error { return validSubject("prefix", prefix) }

// ValidateSubject checks a literal subject, named what in the error; ""
// passes (the caller decides what empty means).
func ValidateSubject(what, subject string) error { return validSubject(what, subject) }

// ValidateQueue checks a queue group name: "" (the default) or one token
// without whitespace, wildcards or dots.
func ValidateQueue(queue string) error {
	if queue == "" {
		return nil
	}
	if strings.ContainsAny(queue, " \t\r\n*>") {
		return fmt.Errorf("queue %q contains whitespace or a wildcard", queue)
	}
	if strings.Contains(queue, ".") {
		return fmt.Errorf("queue %q contains a dot", queue)
	}
	return nil
}

func validSubject(what, s string) error {
	if s == "" {
		return nil
	}
	if strings.ContainsAny(s, " \t\r\n*>") {
		return fmt.Errorf("%s %q contains whitespace or a wildcard", what, s)
	}
	if strings.HasPrefix(s, ".") || strings.HasSuffix(s, ".") || strings.Contains(s, "..") {
		return fmt.Errorf("%s %q has an empty token", what, s)
	}
	return nil
}

// Overlaps reports whether a literal subject is matched by pattern, a
// subject that may hold the wildcards * (one token) and > (the rest).
func Overlaps(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		switch {
		case tok == ">":
			return len(s) > i
		case i >= len(s):
			return false
		case tok != "*" && tok != s[i]:
			return false
		}
	}
	return len(p) == len(s)
}
