package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/flowstate-io/flowstate/internal/binaries"
)

// bin holds the paths of the binaries TestMain builds.
var bin struct {
	worker     string
	natsServer string
}

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "flowstate-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	built, err := binaries.Build(context.Background(), dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	bin.worker, bin.natsServer = built.Worker, built.NATSServer
	if old := os.Getenv(beforeWorkerEnv); old != "" {
		bin.worker = old // the attacks measured on an older build
	}
	return m.Run()
}
