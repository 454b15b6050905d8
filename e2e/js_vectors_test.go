package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// vectorsDir is the shared test vectors folder, relative to this package.
const vectorsDir = "../testdata/vectors"

// TestJavaScriptClientReadsVectors runs js/vectors.mjs: the JavaScript
// client encodes and decodes every aggregate, delta, chunk, v3 report and
// stats view of the shared test vectors byte for byte; a worker run with
// the vectors' --max-flows answers every report vector as the vector says
// (v3 ones included, each accepted one shown by the stats view, a numbered
// one sent again answered 409); a worker given each stats view's reports
// answers the view byte for byte; and a JetStream worker applies every
// stored node value written to its bucket as the vector says.
func TestJavaScriptClientReadsVectors(t *testing.T) {
	t.Parallel()
	node := requireJSClient(t)
	maxFlows := vectorsMaxFlows(t, "reports.json")
	require.Equal(t, maxFlows, vectorsMaxFlows(t, "reports_v3.json"), "one worker judges the reports of both files")

	srv := startJetStreamServer(t)
	w := startWorker(t, srv.URL, "--prefix", "jsvec", "--max-flows", strconv.Itoa(maxFlows))
	stats := startWorker(t, srv.URL, "--prefix", "jsvecstats")
	store := startJSWorkers(t, srv.URL, 1, "--prefix", "jsvecstore")[0]
	ctx, cancel := context.WithTimeout(t.Context(), jsRunTimeout)
	defer cancel()
	dir, err := filepath.Abs(vectorsDir)
	require.NoError(t, err)
	run := startJS(t, ctx, node, "vectors.mjs", dir, w.URL, w.Prefix, stats.Prefix, store.Prefix)
	require.Equal(t, 12, run.passed(t), "checks run")
}

// vectorsMaxFlows returns the max_flows of a report vector file.
func vectorsMaxFlows(t *testing.T, file string) int {
	t.Helper()
	var reports struct {
		MaxFlows int `json:"max_flows"`
	}
	b, err := os.ReadFile(filepath.Join(vectorsDir, file))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &reports))
	require.Positive(t, reports.MaxFlows, "%s: max_flows", file)
	return reports.MaxFlows
}

func TestJavaScriptClientReadsHostileVectors(t *testing.T) {
	t.Parallel()
	node := requireJSClient(t)
	ctx, cancel := context.WithTimeout(t.Context(), jsRunTimeout)
	defer cancel()
	dir, err := filepath.Abs(vectorsDir)
	require.NoError(t, err)
	run := startJS(t, ctx, node, "hostile.mjs", dir)
	require.Equal(t, 6, run.passed(t), "checks run")
}
