package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/flowstate-io/flowstate/internal/binaries"
)

// prepareBinaries returns the binaries of binDir, or builds them into a
// temporary directory that cleanup removes.
func prepareBinaries(ctx context.Context, binDir string) (b binaries.Set, cleanup func(), err error) {
	cleanup = func() {}
	if binDir != "" {
		b = binaries.In(binDir)
		for _, p := range []string{b.Worker, b.NATSServer} {
			if _, err := os.Stat(p); err != nil {
				return b, cleanup, fmt.Errorf("--bin-dir: %w", err)
			}
		}
		return b, cleanup, nil
	}
	dir, err := os.MkdirTemp("", "flowstate-loadtest-")
	if err != nil {
		return b, cleanup, err
	}
	cleanup = func() { _ = os.RemoveAll(dir) }
	b, err = binaries.Build(ctx, dir)
	if err != nil {
		cleanup()
		return b, func() {}, err
	}
	return b, cleanup, nil
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
