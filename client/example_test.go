package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/flowstate"
)

// demo starts an embedded NATS server and an in-process worker for the
// examples, and connects to the server. In production the worker runs on
// its own and the application already holds a connection.
func demo(cfg consumer.Config) (nc *nats.Conn, stop func()) {
	srv, err := runServer()
	if err != nil {
		panic(err)
	}
	stopWorker, err := runWorker(srv.ClientURL(), cfg)
	if err != nil {
		panic(err)
	}
	nc, err = nats.Connect(srv.ClientURL())
	if err != nil {
		panic(err)
	}
	return nc, func() {
		nc.Close()
		_ = stopWorker()
		srv.Shutdown()
	}
}

// A flownode sends its heartbeat report and waits for the worker to apply
// it.
func ExampleClient_Send() {
	nc, stop := demo(consumer.Config{MaxFlows: 100})
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := client.New(nc, client.Options{}) // prefix "flow", 5s timeout
	if err != nil {
		panic(err)
	}
	// The Client numbers the report (node_epoch: its creation time; seq:
	// its next), so that this report, were it delayed in the network, could
	// never replace a later one of this process.
	v, err := c.Send(ctx, client.Report{
		NodeID: 1,
		Value: flowstate.FlowStateValue{
			StateSize:       map[flowstate.FlowID]uint64{7: 1024, 8: 4096},
			LastExecTimeMap: map[flowstate.FlowID]int64{7: 1700000060000},
			StartTimeMap:    map[flowstate.FlowID]int64{7: 1700000000000},
		},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("applied at revision", v.Revision)

	// A report the worker refuses changes nothing and says why.
	tooMany := flowstate.FlowStateValue{StateSize: map[flowstate.FlowID]uint64{}}
	for id := range flowstate.FlowID(101) {
		tooMany.StateSize[id] = 1
	}
	_, err = c.Send(ctx, client.Report{NodeID: 1, Value: tooMany})
	var rejected *client.ServiceError
	if errors.As(err, &rejected) {
		fmt.Println("rejected with code", rejected.Code)
	}

	// Without waiting for an acknowledgement:
	if err := c.Publish(client.Report{NodeID: 2}); err != nil {
		panic(err)
	}
	// Output:
	// applied at revision 1
	// rejected with code 400
}

// A flownode reports its flows' health (protocol v3), and a frontend reads
// the flow stats: per flow the most rows any node processed and the newest
// errors over the nodes, of any size, as values and as the worker's JSON.
func ExampleClient_GetStats() {
	nc, stop := demo(consumer.Config{})
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(nc, client.Options{})
	if err != nil {
		panic(err)
	}
	_, err = c.Send(ctx, client.Report{
		NodeID: 7,
		Value:  flowstate.FlowStateValue{StateSize: map[flowstate.FlowID]uint64{1: 1024}},
		Health: flowstate.Health{
			HasProcessedRows: true,
			HasLastErrors:    true,
			Flows: []flowstate.FlowHealth{{
				ID:            1,
				Has:           flowstate.HasProcessedRows | flowstate.HasLastErrors,
				ProcessedRows: 52000,
				LastErrors:    []flowstate.FlowError{{Time: 1700000000000, Message: "sink table missing"}},
			}},
		},
	})
	if err != nil {
		panic(err)
	}

	view, v, err := c.GetStats(ctx)
	if err != nil {
		panic(err)
	}
	for _, s := range view.Stats {
		fmt.Println("revision", v.Revision, "flow", s.ID, "rows", s.ProcessedRows, "last error", s.LastErrors[0].Message, "on node", s.LastErrors[0].NodeID)
	}
	fmt.Println(string(view.AppendJSON(nil)))
	// Output:
	// revision 1 flow 1 rows 52000 last error sink table missing on node 7
	// {"state_size":{"1":1024},"last_exec_time_map":{},"start_time_map":{},"processed_rows":{"1":52000},"last_errors":{"1":[{"time":1700000000000,"node_id":7,"message":"sink table missing"}]}}
}

// A frontend reads the aggregate once.
func ExampleClient_Get() {
	nc, stop := demo(consumer.Config{})
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(nc, client.Options{Timeout: 2 * time.Second})
	if err != nil {
		panic(err)
	}
	_, err = c.Send(ctx, client.Report{NodeID: 1, Value: flowstate.FlowStateValue{
		StateSize:       map[flowstate.FlowID]uint64{10: 2048, 2: 1024},
		LastExecTimeMap: map[flowstate.FlowID]int64{2: 1700000000000},
	}})
	if err != nil {
		panic(err)
	}

	s, err := c.Get(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("revision", s.Revision, "flow 10 holds", s.Value.StateSize[10], "bytes")

	body, _, err := c.GetJSON(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(body))
	// Output:
	// revision 1 flow 10 holds 2048 bytes
	// {"state_size":{"2":1024,"10":2048},"last_exec_time_map":{"2":1700000000000},"start_time_map":{}}
}

// A frontend follows the live aggregate. Here the flownode reports once
// after each state the frontend sees, so that no state is skipped; a
// frontend slower than the updates gets the newest state instead of each.
func ExampleClient_Watch() {
	nc, stop := demo(consumer.Config{})
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(nc, client.Options{})
	if err != nil {
		panic(err)
	}

	for s, err := range c.Watch(ctx) {
		if err != nil {
			fmt.Println("no state yet:", err) // Watch retries if the loop goes on
			continue
		}
		n := len(s.Value.StateSize)
		var changed []flowstate.FlowID
		for _, f := range s.Changed {
			changed = append(changed, f.ID)
		}
		fmt.Printf("revision %d: %d flows, changed %v (new epoch: %v)\n", s.Revision, n, changed, s.EpochChanged)
		if n == 3 {
			break
		}
		// The flownode reports one more flow.
		r := client.Report{NodeID: 1, Value: flowstate.FlowStateValue{StateSize: map[flowstate.FlowID]uint64{}}}
		for id := range flowstate.FlowID(n + 1) {
			r.Value.StateSize[id+1] = 1024
		}
		if _, err := c.Send(ctx, r); err != nil {
			panic(err)
		}
	}
	// Output:
	// revision 0: 0 flows, changed [] (new epoch: false)
	// revision 1: 1 flows, changed [1] (new epoch: false)
	// revision 2: 2 flows, changed [2] (new epoch: false)
	// revision 3: 3 flows, changed [3] (new epoch: false)
}

// A frontend follows the aggregate through deltas (protocol v2, what Watch
// does against a v2 worker): each state carries the flows that changed,
// and its Value is the whole aggregate, kept up to date. Here the flownode
// reports once after each state the frontend sees.
func ExampleClient_Watch_deltas() {
	nc, stop := demo(consumer.Config{})
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(nc, client.Options{})
	if err != nil {
		panic(err)
	}

	sizes := []uint64{1024, 2048} // the flownode's next reports of flow 1
	for s, err := range c.Watch(ctx) {
		if err != nil {
			fmt.Println(err) // no worker yet: Watch retries
			continue
		}
		for _, f := range s.Changed { // Has == 0: the flow left
			fmt.Println(f.ID, f.StateSize, f.LastExecTime)
		}
		// s.Value is the whole aggregate, updated in place: s.Clone() to keep it.
		if len(sizes) == 0 {
			break
		}
		r := client.Report{NodeID: 1, Value: flowstate.FlowStateValue{
			StateSize:       map[flowstate.FlowID]uint64{1: sizes[0]},
			LastExecTimeMap: map[flowstate.FlowID]int64{1: 1700000000000 + int64(sizes[0])},
		}}
		sizes = sizes[1:]
		if _, err := c.Send(ctx, r); err != nil {
			panic(err)
		}
	}
	// Output:
	// 1 1024 1700000001024
	// 1 2048 1700000002048
}
