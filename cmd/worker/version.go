package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/flowstate-io/flowstate"
)

// version is the release this binary was built from: the module's VERSION
// file, embedded at build time.
var version = flowstate.Version()

// commit and modified are set by the Makefile's builds with -ldflags -X
// (main.commit=<revision>, main.modified=true|false), for a build the go
// command cannot stamp itself: from a git worktree (whose .git is a file),
// with -buildvcs=false, or from an archive. What the go command recorded
// wins.
var commit, modified string

// buildInfo says which build of the worker runs: the release, the commit it
// was built from, whether the tree had changes, and the Go toolchain.
type buildInfo struct {
	Version  string
	Commit   string // the VCS revision; "unknown" when built outside a checkout
	Modified bool   // the tree had uncommitted changes when built
	Go       string // the Go version the binary was built with
	Platform string // GOOS/GOARCH
}

// readBuildInfo reads the build information the go command records in the
// binary (vcs.revision and vcs.modified need a build inside a git clone, with
// -buildvcs left on), else what the Makefile stamped.
func readBuildInfo() buildInfo {
	b := buildInfo{Version: version, Commit: "unknown", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if commit != "" {
		b.Commit, b.Modified = commit, modified == "true"
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && s.Value != "" {
			b.Commit, b.Modified = s.Value, false
			for _, m := range info.Settings {
				if m.Key == "vcs.modified" {
					b.Modified = m.Value == "true"
				}
			}
		}
	}
	return b
}

// modifiedLabel is the modified flag as a metric label and in --version.
func (b buildInfo) modifiedLabel() string {
	if b.Modified {
		return "true"
	}
	return "false"
}

// print writes the build information, one field a line.
func (b buildInfo) print(w io.Writer) {
	fmt.Fprintf(w, "flowstate worker %s\ncommit:   %s\nmodified: %s\ngo:       %s %s\n",
		b.Version, b.Commit, b.modifiedLabel(), b.Go, b.Platform)
}

// runVersion is `worker version`: the build information, as --version.
func runVersion(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	f := newFlagSet("worker version")
	if err := f.parse(args, getenv); err != nil {
		if err == errHelp {
			fmt.Fprint(stdout, "Usage:\n  worker version\n\nPrint the worker's version, the commit it was built from, whether the tree\nhad changes, and the Go version (also: worker --version).\n")
		}
		return exitCode(err, "worker version", stderr)
	}
	readBuildInfo().print(stdout)
	return 0
}
