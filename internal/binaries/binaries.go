package binaries

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// Set is the paths of the built programs.
type Set struct {
	Worker     string
	NATSServer string
}

// In returns the paths of the programs in dir, built or not.
func In(dir string) Set {
	return Set{Worker: filepath.Join(dir, "worker"), NATSServer: filepath.Join(dir, "nats-server")}
}

// Build builds both programs into dir, in parallel, from the module that
// contains the working directory.
func Build(ctx context.Context, dir string) (Set, error) {
	root, err := ModuleRoot()
	if err != nil {
		return Set{}, err
	}
	s := In(dir)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, t := range []struct{ out, pkg string }{
		{s.Worker, "./cmd/worker"},
		{s.NATSServer, "github.com/nats-io/nats-server/v2"},
	} {
		wg.Go(func() { errs[i] = goBuild(ctx, root, t.out, t.pkg) })
	}
	wg.Wait()
	return s, errors.Join(errs...)
}

// ModuleRoot returns the directory of the go.mod at or above the working
// directory.
func ModuleRoot() (string, error) {
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
			return "", errors.New("no go.mod at or above the working directory; run from the module")
		}
		dir = parent
	}
}

// goBuild runs the go command of GOROOT, if set, else the one on PATH.
func goBuild(ctx context.Context, root, out, pkg string) error {
	goTool := "go"
	if goroot := os.Getenv("GOROOT"); goroot != "" {
		if p := filepath.Join(goroot, "bin", "go"); fileExists(p) {
			goTool = p
		}
	}
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", out, pkg)
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
