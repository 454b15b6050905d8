package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/flowstate-io/flowstate/client"
)

// watchTimeFormat is RFC 3339 in UTC with milliseconds.
const watchTimeFormat = "2006-01-02T15:04:05.000Z07:00"

// runWatch is `worker watch`: one line per state update.
func runWatch(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c := newCLICommand("watch", "", `
worker watch follows the flow state that a running worker serves and prints
one line per state: the time it arrived (UTC), its epoch and revision, the
number of flows and their total state size. The first line is the state when
it starts. States come in revision order, never twice; a slow terminal may
skip some but always shows the latest. A line that ends with "(new epoch)"
starts over after the worker's state did (a restart with an empty store).
With --changes, each line is followed by the flows that changed since the
line before (a flow that left shows "left"). Against a v2 worker it follows
the delta updates on <prefix>.state.delta, taking a chunked snapshot when it
misses one, so a state of any size can be watched; --mode v1 follows the
full updates on <prefix>.state (for a worker run with --state-updates full).
It runs until interrupted (SIGINT or SIGTERM), or until --count lines.`, `
worker watch
worker watch --changes
worker watch --prefix staging.flow --count 1`)
	count := c.fs.Int("count", 0, "stop after `n` lines (0: until interrupted); the first line is the current state")
	changes := c.fs.Bool("changes", false, "after each line, print the flows that changed")
	mode := c.fs.String("mode", "auto", "what to follow: auto (deltas if the worker speaks v2), v1 (full updates) or v2 (deltas)")
	if code, ok := c.parse(args, getenv, stdout, stderr); !ok {
		return code
	}
	if *count < 0 {
		return c.fail(stderr, fmt.Errorf("--count %d is negative", *count))
	}
	watchMode, ok := map[string]client.WatchMode{"auto": client.WatchAuto, "v1": client.WatchV1, "v2": client.WatchV2}[*mode]
	if !ok {
		return c.fail(stderr, fmt.Errorf("--mode %q: want auto, v1 or v2", *mode))
	}
	nc, _, code := c.connect(stderr)
	if nc == nil {
		return code
	}
	defer nc.Close()
	cl, err := client.New(nc, client.Options{Prefix: c.prefix, Timeout: c.timeout, WatchMode: watchMode, MaxFlows: cliMaxFlows, MaxGetBytes: cliMaxGetBytes})
	if err != nil {
		return c.errorf(stderr, "%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	lines := 0
	var lastErr error
	for s, err := range cl.Watch(ctx) {
		if err != nil {
			lastErr = err
			c.errorf(stderr, "%v (retrying)", err)
			continue
		}
		lastErr = nil
		if _, err := fmt.Fprintln(stdout, watchLine(time.Now(), s)); err != nil {
			return c.errorf(stderr, "%v", err)
		}
		if *changes {
			if err := writeChanges(stdout, s.Changed); err != nil {
				return c.errorf(stderr, "%v", err)
			}
		}
		if lines++; *count > 0 && lines >= *count {
			return 0
		}
	}
	if ctx.Err() == nil && lastErr != nil {
		return 1 // the watch ended on an error, already reported
	}
	return 0
}

// watchLine is one line of `worker watch`.
func watchLine(at time.Time, s client.State) string {
	line := fmt.Sprintf("%s  epoch %s  revision %d  flows %d  size %s",
		at.UTC().Format(watchTimeFormat), outside(s.Epoch), s.Revision, s.Value.Len(), humanSize(totalSize(s.Value)))
	if s.EpochChanged {
		line += "  (new epoch)"
	}
	return line
}
