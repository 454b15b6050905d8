package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// binaries are the paths of the programs under test.
type binaries struct {
	worker     string
	natsServer string
}

// prepareBinaries returns the binaries of binDir, or builds them into a
// temporary directory that cleanup removes.
func prepareBinaries(ctx context.Context, binDir string) (b binaries, cleanup func(), err error) {
	cleanup = func() {}
	if binDir != "" {
		b = binaries{worker: filepath.Join(binDir, "worker"), natsServer: filepath.Join(binDir, "nats-server")}
		for _, p := range []string{b.worker, b.natsServer} {
			if _, err := os.Stat(p); err != nil {
				return b, cleanup, fmt.Errorf("--bin-dir: %w", err)
			}
		}
		return b, cleanup, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return b, cleanup, err
	}
	dir, err := os.MkdirTemp("", "flowstate-loadtest-")
	if err != nil {
		return b, cleanup, err
	}
	cleanup = func() { _ = os.RemoveAll(dir) }
	b = binaries{worker: filepath.Join(dir, "worker"), natsServer: filepath.Join(dir, "nats-server")}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, t := range []struct{ out, pkg string }{
		{b.worker, "./cmd/worker"},
		{b.natsServer, "github.com/nats-io/nats-server/v2"},
	} {
		wg.Go(func() { errs[i] = goBuild(ctx, root, t.out, t.pkg) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		cleanup()
		return b, func() {}, err
	}
	return b, cleanup, nil
}

// moduleRoot returns the directory of the go.mod at or above the working
// directory.
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
			return "", errors.New("no go.mod at or above the working directory; run from the module")
		}
		dir = parent
	}
}

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

// binaryVersion returns what `path --version` prints, "?" if it fails.
func binaryVersion(ctx context.Context, path string) string {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}
