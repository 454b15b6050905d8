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

// bin holds the programs TestMain builds: the worker, nats-server, the
// worker with the chaosbug tag (an ack that names a wrong revision) and the
// worker with the chaosclock tag (its clock follows a control file).
var bin struct {
	worker, natsServer, brokenWorker, clockWorker string
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
	for _, b := range []struct {
		tag  string
		path *string
	}{{"chaosbug", &bin.brokenWorker}, {"chaosclock", &bin.clockWorker}} {
		*b.path = filepath.Join(dir, "worker-"+b.tag)
		cmd := exec.Command("go", "build", "-tags", b.tag, "-o", *b.path, "./cmd/worker")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build -tags %s: %w\n%s", b.tag, err, out)
		}
	}
	return nil
}
