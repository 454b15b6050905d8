package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostileText is outside text that would drive a terminal: it clears the
// screen, sets the window title, reverses the line (U+202E), breaks it
// (U+2028) and starts a C1 control sequence (U+009B).
const hostileText = "\x1b[2J\x1b]0;pwned\x07\u202eevil\u2028\u009b31m"

// assertInert requires s to hold no character a terminal acts on but the
// line ends.
func assertInert(t *testing.T, s, what string) {
	t.Helper()
	for _, r := range s {
		if r != '\n' && !unicode.IsGraphic(r) {
			assert.Failf(t, "terminal control in output", "%s: %U in %q", what, r, s)
			return
		}
	}
}

// fakeWorker answers every heartbeat on srv's flow.heartbeat.> with reply.
func fakeWorker(t *testing.T, url string, reply func(m *nats.Msg) *nats.Msg) {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	_, err = nc.Subscribe("flow.heartbeat.>", func(m *nats.Msg) { _ = m.RespondMsg(reply(m)) })
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
}

// The epoch and the reason a worker answers with are outside text: send
// refuses an epoch that is not the contract's (1 to 64 printable ASCII
// characters), and prints it and a reason escaped.
func TestSendEscapesTheEpochAndTheReasonItPrints(t *testing.T) {
	srv := startTestServer(t)
	fakeWorker(t, srv.ClientURL(), func(m *nats.Msg) *nats.Msg {
		r := nats.NewMsg(m.Reply)
		if m.Subject == "flow.heartbeat.1" {
			r.Header.Set("Flow-State-Epoch", hostileText)
			r.Header.Set("Flow-State-Revision", "5")
		} else {
			r.Header.Set("Nats-Service-Error-Code", "400")
			r.Header.Set("Nats-Service-Error", hostileText)
		}
		return r
	})
	code, stdout, stderr := runCLI(t, noEnv, "send", "--nats-url", srv.ClientURL(), "--node", "1")
	require.Equal(t, 1, code, stderr)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, "malformed reply")
	assert.Contains(t, stderr, `\x1b[2J`, "the escape shown as text")
	assertInert(t, stderr, "send's epoch")
	code, stdout, stderr = runCLI(t, noEnv, "send", "--nats-url", srv.ClientURL(), "--node", "2")
	require.Equal(t, 1, code)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, "report rejected: ")
	assertInert(t, stderr, "send's reason")
	assert.Equal(t, 1, bytes.Count([]byte(stderr), []byte("\n")), "one line: %q", stderr)
}

// JSON for a terminal escapes what a terminal would act on and stays the
// same JSON value; for a pipe or a file it stays the view's exact bytes.
func TestTerminalJSONEscapesControlsAndKeepsTheValue(t *testing.T) {
	body := []byte(`{"1":[{"time":1,"node_id":7,"message":"` + "\u202eevil\u2028\u009b31m \U0001F600 caf\u00e9 \x7f" + `"}]}` + "\n")
	got := terminalJSON(body)
	assertInert(t, string(got), "terminal JSON")
	var want, have any
	require.NoError(t, json.Unmarshal(body, &want))
	require.NoError(t, json.Unmarshal(got, &have), "%s", got)
	assert.Equal(t, want, have, "the same JSON value")
	assert.Contains(t, string(got), `\u202e`)
	assert.Contains(t, string(got), "\U0001F600 caf\u00e9", "graphic text as it is")

	var pipe bytes.Buffer
	assert.Equal(t, body, forTerminal(&pipe, body), "a pipe gets the exact bytes")
	plain := []byte(`{"state_size":{"1":1}}`)
	assert.Equal(t, plain, terminalJSON(plain))
}
