package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
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
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	bin.worker = filepath.Join(dir, "worker")
	bin.natsServer = filepath.Join(dir, "nats-server")
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, target := range []struct{ out, pkg string }{
		{bin.worker, "./cmd/worker"},
		{bin.natsServer, "github.com/nats-io/nats-server/v2"},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = goBuild(root, target.out, target.pkg)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	return m.Run()
}

// moduleRoot returns the directory of the go.mod above the working
// directory (go test runs in the package's directory).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the e2e directory")
		}
		dir = parent
	}
}

func goBuild(root, out, pkg string) error {
	goTool := "go"
	if goroot := os.Getenv("GOROOT"); goroot != "" {
		if p := filepath.Join(goroot, "bin", "go"); fileExists(p) {
			goTool = p
		}
	}
	cmd := exec.Command(goTool, "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
