package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/flowstate"
)

// runSend is `worker send`: one heartbeat report, as a flownode sends it.
func runSend(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c := newCLICommand("send", "--node N [--flow ID:SIZE:LAST[:START]]... [--no-ack | --out FILE]", `
worker send sends one heartbeat report as flownode --node would, waits until
the worker has applied it, and prints the revision and epoch of the state
that includes it. The report replaces the node's previous one whole: with no
--flow, it removes all of the node's flows. A report the worker rejects
prints the reason and exits 1.

--flow gives one flow as ID:SIZE:LAST[:START]: its id, state size in bytes,
last execution time and start time in unix milliseconds. LAST and START may
be "now"; SIZE, LAST and START may be "-" to leave that value out. Repeat
--flow for each flow.

--out FILE writes the report's msgpack body to FILE ("-": standard output)
instead of sending it, for another NATS client to send to the node's
heartbeat subject: nats req flow.heartbeat.N --force-stdin < FILE.`, `
worker send --node 1 --flow 1024:65536:now:1700000000000 --flow 1025:4096:now
worker send --node 1    # node 1 has no flows anymore
worker send --node 7 --flow 1024:65536:now --out report.bin`)
	var node, nodeEpoch uint64
	nodeSet := false
	c.fs.Func("node", "the flownode's `id` (required)", func(s string) error {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return errors.New("want a decimal uint64")
		}
		node, nodeSet = v, true
		return nil
	})
	var flows []flowstate.Flow
	c.fs.Func("flow", "a `flow` of the report, as ID:SIZE:LAST[:START]; repeat for each flow", func(s string) error {
		f, err := parseFlowSpec(s, time.Now())
		if err != nil {
			return err
		}
		for _, g := range flows {
			if g.ID == f.ID {
				return fmt.Errorf("flow %d given twice", f.ID)
			}
		}
		flows = append(flows, f)
		return nil
	})
	c.fs.Uint64Var(&nodeEpoch, "node-epoch", 0, "the flownode's start time in unix `ms` (0: left out)")
	noAck := c.fs.Bool("no-ack", false, "publish the report without waiting for the worker (prints nothing)")
	out := c.fs.String("out", "", "write the report's msgpack body to `FILE` (\"-\": standard output) instead of sending it")
	if code, ok := c.parse(args, getenv, stdout, stderr); !ok {
		return code
	}
	if !nodeSet {
		return c.fail(stderr, errors.New("--node is required"))
	}
	if *out != "" && *noAck {
		return c.fail(stderr, errors.New("--out and --no-ack exclude each other"))
	}
	r := client.Report{NodeID: node, NodeEpoch: nodeEpoch, Value: flowstate.ValueOf(flows)}
	if *out != "" {
		if err := writeReport(*out, stdout, r); err != nil {
			return c.errorf(stderr, "%v", err)
		}
		return 0
	}
	nc, cl, code := c.connect(stderr)
	if nc == nil {
		return code
	}
	defer nc.Close()
	if *noAck {
		if err := cl.Publish(r); err != nil {
			return c.errorf(stderr, "%v", err)
		}
		if err := nc.FlushTimeout(c.timeout); err != nil {
			return c.errorf(stderr, "flush: %v", err)
		}
		return 0
	}
	v, err := cl.Send(context.Background(), r)
	var se *client.ServiceError
	switch {
	case errors.As(err, &se) && se.Rejected():
		return c.errorf(stderr, "report rejected: %s", se.Reason)
	case err != nil:
		return c.errorf(stderr, "%v", err)
	}
	fmt.Fprintf(stdout, "applied at revision %d, epoch %s\n", v.Revision, v.Epoch)
	return 0
}

// writeReport writes r's msgpack body to the file path, or to stdout if
// path is "-".
func writeReport(path string, stdout io.Writer, r client.Report) error {
	body := r.AppendMsgpack(nil)
	if path == "-" {
		_, err := stdout.Write(body)
		return err
	}
	return os.WriteFile(path, body, 0o644)
}

// parseFlowSpec parses ID:SIZE:LAST[:START]; "now" stands for now, "-" for
// a value left out.
func parseFlowSpec(s string, now time.Time) (flowstate.Flow, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 && len(parts) != 4 {
		return flowstate.Flow{}, errors.New("want ID:SIZE:LAST[:START]")
	}
	id, err := strconv.ParseUint(parts[0], 10, 32)
	if err != nil {
		return flowstate.Flow{}, fmt.Errorf("flow id %q is not a uint32", parts[0])
	}
	f := flowstate.Flow{ID: flowstate.FlowID(id)}
	if parts[1] != "-" {
		if f.StateSize, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
			return flowstate.Flow{}, fmt.Errorf("size %q is not a byte count", parts[1])
		}
		f.Has |= flowstate.HasStateSize
	}
	msOf := func(what, v string) (int64, bool, error) {
		switch v {
		case "-":
			return 0, false, nil
		case "now":
			return now.UnixMilli(), true, nil
		}
		t, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("%s %q is not unix ms, now or -", what, v)
		}
		return t, true, nil
	}
	t, ok, err := msOf("last execution time", parts[2])
	if err != nil {
		return flowstate.Flow{}, err
	}
	if ok {
		f.LastExecTime, f.Has = t, f.Has|flowstate.HasLastExecTime
	}
	if len(parts) == 4 {
		t, ok, err := msOf("start time", parts[3])
		if err != nil {
			return flowstate.Flow{}, err
		}
		if ok {
			f.StartTime, f.Has = t, f.Has|flowstate.HasStartTime
		}
	}
	return f, nil
}
