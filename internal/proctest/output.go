package proctest

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Output collects what a process writes. It is safe for concurrent use,
// keeps everything or the last Keep bytes, and wakes waiters on every
// write. Positions (Len, Since, Await) count every byte ever written, so
// that a waiter can look only at what came after a point, such as the
// start of a process's latest run.
type Output struct {
	keep int // bytes kept; 0: all

	mu      sync.Mutex // guards the fields below
	buf     []byte
	dropped int64         // bytes dropped from the front of buf
	changed chan struct{} // closed and replaced on every write
}

// NewOutput returns an Output that keeps the last keep bytes (0: all).
func NewOutput(keep int) *Output {
	return &Output{keep: keep, changed: make(chan struct{})}
}

// Write appends p.
func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf = append(o.buf, p...)
	if o.keep > 0 && len(o.buf) > 2*o.keep {
		cut := len(o.buf) - o.keep
		o.dropped += int64(cut)
		o.buf = append(o.buf[:0], o.buf[cut:]...)
	}
	close(o.changed)
	o.changed = make(chan struct{})
	return len(p), nil
}

// String returns what is kept.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return string(o.buf)
}

// Len returns how many bytes were ever written: the position of the next
// byte.
func (o *Output) Len() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.dropped + int64(len(o.buf))
}

// Since returns what is kept of the bytes written from position from on.
func (o *Output) Since(from int64) string {
	s, _ := o.since(from)
	return s
}

// Snapshot returns what is kept and a channel closed at the next write.
func (o *Output) Snapshot() (string, <-chan struct{}) { return o.since(0) }

func (o *Output) since(from int64) (string, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	skip := max(0, from-o.dropped)
	if skip > int64(len(o.buf)) {
		skip = int64(len(o.buf))
	}
	return string(o.buf[skip:]), o.changed
}

// Tail returns the last n lines kept.
func (o *Output) Tail(n int) string {
	s := strings.TrimRight(o.String(), "\n")
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Lines returns the kept lines that match re.
func (o *Output) Lines(re *regexp.Regexp) []string {
	var out []string
	for line := range bytes.Lines([]byte(o.String())) {
		if re.Match(line) {
			out = append(out, string(bytes.TrimRight(line, "\n")))
		}
	}
	return out
}

// Await waits until what was written from position from on matches re,
// and returns the submatches of the first match. It gives up when done
// closes (the writer has gone; one last look is taken) or after timeout.
func (o *Output) Await(from int64, re *regexp.Regexp, done <-chan struct{}, timeout time.Duration) ([]string, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s, changed := o.since(from)
		if m := re.FindStringSubmatch(s); m != nil {
			return m, nil
		}
		select {
		case <-changed:
		case <-done:
			if m := re.FindStringSubmatch(o.Since(from)); m != nil {
				return m, nil
			}
			return nil, fmt.Errorf("%w before the output matched %q", ErrExited, re)
		case <-deadline.C:
			return nil, fmt.Errorf("%w: the output did not match %q within %v", ErrTimeout, re, timeout)
		}
	}
}
