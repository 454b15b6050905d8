package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	fsclient "github.com/flowstate-io/flowstate/client"
)

// The server and worker of js/v3.mjs: a max payload that a report of 6,000
// bytes of errors fits and a stats view of 12,000 does not, and an error
// limit that 12,000 bytes fit and 18,000 do not.
const (
	jsV3MaxPayload    = 8192
	jsV3MaxErrorBytes = 16000
)

// TestJavaScriptClientSpeaksV3 runs js/v3.mjs, a flownode and a frontend of
// PROTOCOL.md v3 in JavaScript, against a fresh worker run with
// --max-error-bytes on a server with a small max payload: its reports are
// numbered (one node_epoch per client, seq increasing), an older one is a
// StaleReportError (409) naming both reports and changes nothing, the stats
// view decoded from msgpack is its JSON view and the merge of the reports
// sent, an unknown view is answered 400, a view past the max payload is
// read in chunks, and a report past --max-error-bytes is answered 507.
// Twice the script asks for the stats view as the Go client reads it
// (GetStats, in chunks, written with AppendJSON): this test answers with
// its revision and JSON, which the script requires equal to its own.
func TestJavaScriptClientSpeaksV3(t *testing.T) {
	t.Parallel()
	node := requireJSClient(t)
	conf := filepath.Join(t.TempDir(), "nats.conf")
	require.NoError(t, os.WriteFile(conf, []byte("max_payload: "+strconv.Itoa(jsV3MaxPayload)+"\n"), 0o600))
	srv := startServer(t, "-c", conf)
	w := startWorker(t, srv.URL, "--prefix", "jsv3", "--max-error-bytes", strconv.Itoa(jsV3MaxErrorBytes))
	nc, err := nats.Connect(srv.URL, nats.Timeout(startTimeout), nats.NoReconnect())
	require.NoError(t, err)
	defer nc.Close()
	require.EqualValues(t, jsV3MaxPayload, nc.MaxPayload())
	goClient, err := fsclient.New(nc, fsclient.Options{Prefix: w.Prefix})
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), jsRunTimeout)
	defer cancel()
	run := startJS(t, ctx, node, "v3.mjs", w.URL, w.Prefix, strconv.Itoa(jsV3MaxErrorBytes))
	asked := 0
	for {
		select {
		case line := <-run.stdout.lines:
			if line != "# go stats" {
				continue
			}
			asked++
			view, v, err := goClient.GetStats(ctx)
			require.NoError(t, err, "the Go client's GetStats")
			_, err = fmt.Fprintf(run.stdin, "%d %x\n", v.Revision, view.AppendJSON(nil))
			require.NoError(t, err)
		case <-run.done():
			require.Equal(t, 7, run.passed(t), "checks run")
			require.Equal(t, 2, asked, "the script asked for the Go client's view twice")
			return
		}
	}
}
