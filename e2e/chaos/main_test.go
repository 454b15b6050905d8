package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/flowstate-io/flowstate/internal/binaries"
)

// bin holds the programs TestMain builds: the worker, nats-server, and the
// worker with the chaosbug tag (an ack that names a wrong revision).
var bin struct {
	worker, natsServer, brokenWorker string
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "flowstate-chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := build(dir); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		// Every client, connection and process reader has stopped.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: leaked goroutines:", err)
			return 1
		}
	}
	return code
}

func build(dir string) error {
	built, err := binaries.Build(context.Background(), dir)
	if err != nil {
		return err
	}
	bin.worker, bin.natsServer = built.Worker, built.NATSServer
	root, err := binaries.ModuleRoot()
	if err != nil {
		return err
	}
	bin.brokenWorker = filepath.Join(dir, "worker-chaosbug")
	cmd := exec.Command("go", "build", "-tags", "chaosbug", "-o", bin.brokenWorker, "./cmd/worker")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build -tags chaosbug: %w\n%s", err, out)
	}
	return nil
}
