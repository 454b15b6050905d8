package main

import (
	"bufio"
	"context"
	"fmt"
	"io"

	"github.com/flowstate-io/flowstate/client"
)

// runGet is `worker get`: it prints the current aggregate.
func runGet(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c := newCLICommand("get", "", `
worker get prints the flow state that a running worker serves: one line per
flow (its id, state size, last execution and start times in UTC, and the
uptime between them), then the state's epoch and revision. With --json it
prints exactly the serde_json bytes GreptimeDB stores for FlowStateValue, and
a newline, for a state of any size (rendered from a chunked snapshot).

With --stats it prints the flow stats (protocol v3): per flow its id, state
size, last execution, start, uptime, the rows processed (the most any node
reports), its error count and its newest error (cut to the line, control
characters escaped); with --stats --json, the stats view's JSON bytes, as
the worker writes them, and a newline; both for a view of any size (read in
chunks).`, `
worker get
worker get --nats-url nats://10.0.0.5:4222 --json | jq .state_size
worker get --stats`)
	asJSON := c.fs.Bool("json", false, "print the aggregate's JSON bytes from the worker instead of a table")
	stats := c.fs.Bool("stats", false, "print the flow stats (rows processed, last errors) instead of the aggregate")
	if code, ok := c.parse(args, getenv, stdout, stderr); !ok {
		return code
	}
	nc, cl, code := c.connect(stderr)
	if nc == nil {
		return code
	}
	defer nc.Close()
	ctx := context.Background()
	if *stats {
		view, v, err := cl.GetStats(ctx)
		if err == nil && *asJSON {
			_, err = stdout.Write(forTerminal(stdout, append(view.AppendJSON(nil), '\n')))
		} else if err == nil {
			out := bufio.NewWriterSize(stdout, 1<<16)
			if err = printStats(out, view, v); err == nil {
				err = out.Flush()
			}
		}
		if err != nil {
			return c.errorf(stderr, "%v", err)
		}
		return 0
	}
	if *asJSON {
		body, _, err := cl.GetJSON(ctx)
		if err != nil {
			return c.errorf(stderr, "%v", err)
		}
		if _, err := stdout.Write(forTerminal(stdout, append(body, '\n'))); err != nil {
			return c.errorf(stderr, "%v", err)
		}
		return 0
	}
	s, err := cl.Get(ctx)
	if err != nil {
		return c.errorf(stderr, "%v", err)
	}
	// One write per buffer, not per table cell: a state may hold a
	// million flows.
	out := bufio.NewWriterSize(stdout, 1<<16)
	err = printState(out, s)
	if err == nil {
		err = out.Flush()
	}
	if err != nil {
		return c.errorf(stderr, "%v", err)
	}
	return 0
}

// printState writes s as a table and a line with its version.
func printState(w io.Writer, s client.State) error {
	if err := writeTable(w, s.Value); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nepoch %s, revision %d\n", outside(s.Epoch), s.Revision)
	return err
}
