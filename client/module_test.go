package client_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/binaries"
)

// modulePath is the path a Go program depends on: `go get
// github.com/flowstate-io/flowstate/client`.
const modulePath = "github.com/flowstate-io/flowstate"

// userProgram is a flownode and a frontend as a user writes them, outside
// this module, naming no package but client and nats.go.
const userProgram = `package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/client"
)

func main() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer nc.Close()
	c, err := client.New(nc, client.Options{Prefix: "flow"})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.Get(ctx) // a frontend's snapshot; its maps are never nil
	if err != nil {
		panic(err)
	}
	fmt.Println(s.Epoch, s.Revision, len(s.Value.StateSize))
	s.Value.StateSize[7] = 1024
	v, err := c.Send(ctx, client.Report{NodeID: 1, Value: s.Value}) // a flownode's report
	if err != nil {
		panic(err)
	}
	fmt.Println(v.Revision)
}
`

// TestAProgramOutsideTheModuleBuildsAgainstTheClient writes a program in a
// module of its own that requires this module by its path, with a replace
// to this checkout (as a user's CI would before a release), and builds it
// with the go command: the module path and the client's public API are
// what a user imports.
func TestAProgramOutsideTheModuleBuildsAgainstTheClient(t *testing.T) {
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		var lookErr error
		if goTool, lookErr = exec.LookPath("go"); lookErr != nil {
			t.Skip("the go command is not installed (not in GOROOT/bin, not on PATH): this test builds a program with it")
		}
	}
	root, err := binaries.ModuleRoot()
	require.NoError(t, err)
	dir := t.TempDir()
	goMod := "module example.com/flownode\n\ngo 1.26\n\nrequire " + modulePath + " v0.0.0\n\nreplace " + modulePath + " => " + root + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(goMod), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(userProgram), 0o644))

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	run := func(args ...string) {
		cmd := exec.CommandContext(ctx, goTool, args...)
		cmd.Dir = dir
		// The user's module alone: no workspace, no flags of this build.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s in a module outside this one failed (the module path in go.mod, or the client's API, changed?):\n%s", strings.Join(args, " "), out)
	}
	// tidy resolves nats.go and the rest from the module cache (or the
	// proxy) and writes go.sum, as `go get` would.
	run("mod", "tidy")
	run("build", "-o", filepath.Join(dir, "flownode"), ".")
	_, err = os.Stat(filepath.Join(dir, "flownode"))
	require.NoError(t, err)
}
