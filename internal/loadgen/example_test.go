package loadgen_test

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/internal/loadgen"
)

// exampleConn stands for the caller's connection to a NATS server a worker
// serves; the example is compiled, not run, as it needs both.
var exampleConn *nats.Conn

// A benchmark harness drives the worker with simulated flownodes, 256
// acknowledged reports in flight, and checks the final aggregate.
func Example() {
	g, err := loadgen.New(exampleConn, loadgen.Config{Nodes: 1000, Flows: 10, Duration: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	res := g.Run(context.Background())
	chk, err := g.Check(context.Background())
	if err != nil {
		panic(err)
	}
	fmt.Printf("%.0f reports/s, ack p99 %v, exact %v\n", res.Rate(), res.Latency.P99, chk.Exact())
}
