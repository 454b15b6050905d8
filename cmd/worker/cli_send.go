package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
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

Protocol v3: --rows ID:N gives the rows flow ID processed since the node's
process started; --error ID:TIME:MESSAGE one of its last errors (TIME in
unix ms or "now"; newest first, at most 3 a flow); --seq N numbers the
report within the process that --node-epoch names: a report not newer than
the one the state holds for that process is refused as stale (409). The
report carries exactly what the flags say: without --node-epoch and --seq it
has no node_epoch and no seq, and is applied in arrival order (the Go
client numbers a flownode's reports by default; one command is no process).

--out FILE writes the report's msgpack body to FILE ("-": standard output)
instead of sending it, for another NATS client to send to the node's
heartbeat subject: nats req flow.heartbeat.N --force-stdin < FILE.`, `
worker send --node 1 --flow 1024:65536:now:1700000000000 --flow 1025:4096:now
worker send --node 1    # node 1 has no flows anymore
worker send --node 7 --flow 1024:65536:now --out report.bin
worker send --node 7 --node-epoch 1700000000000 --seq 42 --flow 1:1024:now --rows 1:52000 --error "1:now:sink table missing"`)
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
	var health flowstate.Health
	c.fs.Func("rows", "a flow's processed rows, as `ID:N` (protocol v3); repeat for each flow", func(s string) error {
		id, n, err := parseRowsSpec(s)
		if err != nil {
			return err
		}
		f := healthOf(&health, id)
		f.Has |= flowstate.HasProcessedRows
		f.ProcessedRows = n
		health.HasProcessedRows = true
		return nil
	})
	c.fs.Func("error", "one of a flow's last errors, as `ID:TIME:MESSAGE` (protocol v3), newest first; repeat", func(s string) error {
		id, e, err := parseErrorSpec(s, time.Now())
		if err != nil {
			return err
		}
		f := healthOf(&health, id)
		f.Has |= flowstate.HasLastErrors
		f.LastErrors = append(f.LastErrors, e)
		health.HasLastErrors = true
		return nil
	})
	c.fs.Func("seq", "the report's `N` within its process (protocol v3; with --node-epoch)", func(s string) error {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return errors.New("want a decimal uint64")
		}
		health.Seq, health.HasSeq = v, true
		return nil
	})
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
	slices.SortFunc(health.Flows, func(a, b flowstate.FlowHealth) int { return cmp.Compare(a.ID, b.ID) })
	r := client.Report{NodeID: node, NodeEpoch: nodeEpoch, Value: flowstate.ValueOf(flows), Health: health}
	if *out != "" {
		if err := writeReport(*out, stdout, r); err != nil {
			return c.errorf(stderr, "%v", err)
		}
		return 0
	}
	c.unnumbered = true // the report the flags describe, nothing more
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
	fmt.Fprintf(stdout, "applied at revision %d, epoch %s\n", v.Revision, outside(v.Epoch))
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

// healthOf returns h's health of flow id, added if missing.
func healthOf(h *flowstate.Health, id flowstate.FlowID) *flowstate.FlowHealth {
	for i := range h.Flows {
		if h.Flows[i].ID == id {
			return &h.Flows[i]
		}
	}
	h.Flows = append(h.Flows, flowstate.FlowHealth{ID: id})
	return &h.Flows[len(h.Flows)-1]
}

// parseRowsSpec parses --rows ID:N.
func parseRowsSpec(s string) (flowstate.FlowID, uint64, error) {
	idText, nText, ok := strings.Cut(s, ":")
	id, err := strconv.ParseUint(idText, 10, 32)
	if !ok || err != nil {
		return 0, 0, errors.New("want ID:N, a uint32 flow id and a count")
	}
	n, err := strconv.ParseUint(nText, 10, 64)
	if err != nil {
		return 0, 0, errors.New("want ID:N, N a decimal uint64")
	}
	return flowstate.FlowID(id), n, nil
}

// parseErrorSpec parses --error ID:TIME:MESSAGE; TIME may be "now".
func parseErrorSpec(s string, now time.Time) (flowstate.FlowID, flowstate.FlowError, error) {
	parts := strings.SplitN(s, ":", 3)
	if len(parts) != 3 {
		return 0, flowstate.FlowError{}, errors.New("want ID:TIME:MESSAGE")
	}
	id, err := strconv.ParseUint(parts[0], 10, 32)
	if err != nil {
		return 0, flowstate.FlowError{}, errors.New("want ID:TIME:MESSAGE, ID a uint32 flow id")
	}
	at := now.UnixMilli()
	if parts[1] != "now" {
		if at, err = strconv.ParseInt(parts[1], 10, 64); err != nil {
			return 0, flowstate.FlowError{}, errors.New(`want ID:TIME:MESSAGE, TIME in unix ms or "now"`)
		}
	}
	if !flowstate.ValidMessage(parts[2]) {
		return 0, flowstate.FlowError{}, fmt.Errorf("the message must be 1 to %d bytes of UTF-8", flowstate.MaxErrorMessage)
	}
	return flowstate.FlowID(id), flowstate.FlowError{Time: at, Message: parts[2]}, nil
}
