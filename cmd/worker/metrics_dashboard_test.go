package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/internal/natstest"
	"github.com/flowstate-io/flowstate/internal/wait"
)

// The operator assets in deploy/.
const (
	dashboardFile = "../../deploy/grafana/flowstate.json"
	alertsFile    = "../../deploy/prometheus/alerts.yml"
)

// metricName matches the names of the worker's metrics in a query.
var metricName = regexp.MustCompile(`\b(?:flowstate|process|go)_[a-zA-Z0-9_:]*`)

// Every metric that the dashboard and the alerts query is one that a worker
// exports: a renamed metric would leave a panel empty or an alert silent.
// And each is read as its type says: a counter through rate() or
// increase(), a gauge as it is.
func TestDashboardAndAlertsQueryOnlyExportedMetrics(t *testing.T) {
	exported := liveMetricNames(t)

	dashboard := dashboardQueries(t)
	require.NotEmpty(t, dashboard)
	alerts, err := os.ReadFile(alertsFile)
	require.NoError(t, err)
	for _, src := range []struct {
		file    string
		queries []string
	}{
		{dashboardFile, dashboard},
		{alertsFile, []string{string(alerts)}},
	} {
		used := make(map[string]bool)
		for _, q := range src.queries {
			for _, at := range metricName.FindAllStringIndex(q, -1) {
				name := q[at[0]:at[1]]
				used[name] = true
				// A counter (and a histogram's series) is read through its
				// rate, which survives a restart; a gauge never is.
				counted := exported[name] == "counter" || exported[name] == "histogram"
				byRate := hasAnySuffix(q[:at[0]], "rate(", "irate(", "increase(")
				assert.Equal(t, counted, byRate, "%s: %s (a %s) in %q", src.file, name, exported[name], q)
			}
		}
		require.Greater(t, len(used), 8, "%s: too few metric names found; is the pattern right?", src.file)
		for name := range used {
			assert.NotEmpty(t, exported[name], "%s queries %s, which the worker does not export", src.file, name)
		}
	}
}

func hasAnySuffix(s string, suffixes ...string) bool {
	return slices.ContainsFunc(suffixes, func(x string) bool { return strings.HasSuffix(s, x) })
}

// liveMetricNames starts a worker of a shared JetStream store with
// --metrics-flows 5, sends it reports (one rejected; one with the v3
// processed rows and errors) so that every series exists, and returns the
// names on its /metrics, with the type of each one's family.
func liveMetricNames(tb *testing.T) map[string]string {
	tb.Helper()
	srv := natstest.Start(tb, &server.Options{JetStream: true})
	m, _ := startMain(tb, "--nats-url", srv.ClientURL(), "--kv", "jetstream", "--kv-bucket", "dashboard_test",
		"--metrics-addr", "127.0.0.1:0", "--metrics-flows", "5", "--log-level", "error")
	awaitStatus(tb, m.metricsAddr, "/readyz", http.StatusOK)

	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(tb, err)
	defer nc.Close()
	all := flowstate.HasStateSize | flowstate.HasLastExecTime | flowstate.HasStartTime
	now := time.Now().UnixMilli()
	report := codec.AppendReport(nil, &codec.Report{NodeID: 7, NodeEpoch: uint64(now), HasNodeEpoch: true, Flows: []flowstate.Flow{
		{ID: 1, Has: all, StateSize: 900, LastExecTime: now, StartTime: now - 60_000},
		{ID: 2, Has: all, StateSize: 100, LastExecTime: now, StartTime: now - 60_000},
	}, Health: flowstate.Health{HasProcessedRows: true, HasLastErrors: true, Flows: []flowstate.FlowHealth{
		{ID: 1, Has: flowstate.HasProcessedRows | flowstate.HasLastErrors, ProcessedRows: 52000,
			LastErrors: []flowstate.FlowError{{Time: now, Message: "sink table missing"}}},
	}}})
	_, err = nc.Request("flow.heartbeat.7", report, 5*time.Second)
	require.NoError(tb, err)
	msg, err := nc.Request("flow.heartbeat.8", report, 5*time.Second) // node id mismatch
	require.NoError(tb, err)
	require.Equal(tb, "400", msg.Header.Get("Nats-Service-Error-Code"))

	// The per-flow metrics are refreshed once per publish interval.
	want := []string{"flowstate_flow_state_size_bytes", "flowstate_flow_last_exec_time_seconds", "flowstate_publisher", "flowstate_reports_rejected_total",
		"flowstate_flow_processed_rows_total", "flowstate_flow_last_error_time_seconds", "flowstate_error_bytes", "flowstate_max_error_bytes",
		"flowstate_aggregate_key_current"} // once it is the publisher
	var names map[string]string
	wait.Until(tb, 15*time.Second, 20*time.Millisecond, func() (bool, string) {
		_, body := scrape(tb, m.metricsAddr, "/metrics")
		names = exposedNames(body)
		missing := slices.DeleteFunc(slices.Clone(want), func(n string) bool { return names[n] != "" })
		return len(missing) == 0, fmt.Sprintf("the live worker does not export %v", missing)
	})
	return names
}

// exposedNames returns the names of the samples of a /metrics body, each
// with the type of its family (counter, gauge, histogram, ...).
func exposedNames(body string) map[string]string {
	names := make(map[string]string)
	family := ""
	for line := range strings.Lines(body) {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			family = f[3]
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = family
		}
	}
	return names
}

// dashboardQueries returns every PromQL expression of the dashboard: its
// panels' targets and its template variables' queries.
func dashboardQueries(tb testing.TB) []string {
	tb.Helper()
	raw, err := os.ReadFile(dashboardFile)
	require.NoError(tb, err)
	var doc any
	require.NoError(tb, json.Unmarshal(raw, &doc))
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if s, ok := e.(string); ok && slices.Contains([]string{"expr", "query", "definition"}, k) {
					out = append(out, s)
				}
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(doc)
	return out
}
