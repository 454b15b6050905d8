package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// vectorsDir is the shared test vectors folder, relative to this package.
const vectorsDir = "../testdata/vectors"

// TestJavaScriptClientReadsVectors runs js/vectors.mjs: the JavaScript
// client encodes and decodes every aggregate, delta and chunk of the shared
// test vectors byte for byte, and a worker run with the vectors' --max-flows
// answers every report vector as the vector says.
func TestJavaScriptClientReadsVectors(t *testing.T) {
	t.Parallel()
	node := requireJSClient(t)
	var reports struct {
		MaxFlows int `json:"max_flows"`
	}
	b, err := os.ReadFile(filepath.Join(vectorsDir, "reports.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &reports))
	require.Positive(t, reports.MaxFlows, "reports.json: max_flows")

	srv := startServer(t)
	w := startWorker(t, srv.URL, "--prefix", "jsvec", "--max-flows", strconv.Itoa(reports.MaxFlows))
	ctx, cancel := context.WithTimeout(t.Context(), jsRunTimeout)
	defer cancel()
	dir, err := filepath.Abs(vectorsDir)
	require.NoError(t, err)
	cmd := exec.CommandContext(ctx, node, "vectors.mjs", dir, w.URL, w.Prefix)
	cmd.Dir = jsDir
	cmd.Env = cleanEnv()
	cmd.WaitDelay = stopTimeout
	stdout := &lineLogger{t: t}
	cmd.Stdout = stdout
	stderr := &lineLogger{t: t, prefix: "stderr: "}
	cmd.Stderr = stderr
	err = cmd.Run()
	out := stdout.close()
	stderr.close()
	require.Equal(t, 5, requireJSPassed(t, ctx, "vectors.mjs", out, err), "checks run")
}
