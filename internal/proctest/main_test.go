package proctest

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/flowstate-io/flowstate/internal/binaries"
)

// natsServer is the nats-server binary TestMain builds.
var natsServer string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "flowstate-proctest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "proctest:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	built, err := binaries.Build(context.Background(), dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "proctest:", err)
		return 1
	}
	natsServer = built.NATSServer
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "proctest: leaked goroutines:", err)
			return 1
		}
	}
	return code
}
