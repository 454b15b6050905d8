package e2e

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// permissionsConf gives each user only what it needs: the worker takes
// heartbeats and gets, serves its micro service and replies, and looks for
// the other workers of its prefix ($SRV.INFO.flowstate, replies to an
// inbox); a flownode publishes on its own heartbeat subject only (and
// receives the replies to its requests); a frontend gets, asks for the node
// view and follows the state, full and delta updates (v2). docs/operating.md's
// Security section shows it.
const permissionsConf = `authorization {
  users = [
    {user: worker, password: "worker-secret", permissions: {
      publish: {allow: ["flow.state", "flow.state.delta", "_INBOX.>", "$SRV.INFO.flowstate"]}
      subscribe: {allow: ["flow.heartbeat.*", "flow.state.get", "flow.state.nodes", "$SRV.>", "_INBOX.>"]}
    }}
    {user: node7, password: "node7-secret", permissions: {
      publish: {allow: ["flow.heartbeat.7"]}
      subscribe: {allow: ["_INBOX.>"]}
    }}
    {user: node8, password: "node8-secret", permissions: {
      publish: {allow: ["flow.heartbeat.8"]}
      subscribe: {allow: ["_INBOX.>"]}
    }}
    {user: frontend, password: "frontend-secret", permissions: {
      publish: {allow: ["flow.state.get", "flow.state.nodes"]}
      subscribe: {allow: ["_INBOX.>", "flow.state", "flow.state.delta"]}
    }}
  ]
}
`

// TestPermissionsAndSubjectCheckStopNodeSpoofing shows the anti-spoofing
// end to end. node7 may publish only on flow.heartbeat.7, and cannot change
// node 8's state: the server refuses its publish on flow.heartbeat.8, and
// the worker rejects, with a 400 naming node_id, a report on its own
// subject that claims node_id 8. Node 8's state and the revision stay as
// they were; node7's own report is applied.
func TestPermissionsAndSubjectCheckStopNodeSpoofing(t *testing.T) {
	t.Parallel()
	frontendOpt := nats.UserInfo("frontend", "frontend-secret")
	srv := startConfServer(t, "nats", permissionsConf, frontendOpt)
	w := launchWorker(t, []string{"FLOWSTATE_NATS_PASSWORD=worker-secret"},
		"--nats-url", srv.URL, "--nats-user", "worker", "--publish-interval", "0")
	frontend := dialClient(t, w, frontendOpt)
	awaitServing(t, w, frontend)

	asyncErrs := make(chan error, 16)
	node7 := dialClient(t, w, nats.UserInfo("node7", "node7-secret"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case asyncErrs <- err:
			default:
			}
		}))
	node8 := dialClient(t, w, nats.UserInfo("node8", "node8-secret"))

	deltas, err := frontend.nc.SubscribeSync("flow.state.delta")
	require.NoError(t, err)
	require.NoError(t, frontend.nc.Flush())
	node8State := flowState{StateSize: map[uint32]uint64{8: 800}, LastExecTime: map[uint32]int64{8: 1700000000008}}
	acked := node8.report(8, codecReport(8, node8State))
	require.Equal(t, acked, frontend.requireState(node8State))
	_, err = deltas.NextMsg(messageTimeout)
	require.NoError(t, err, "the frontend follows delta updates")
	nodes := frontend.request("flow.state.nodes", nil, nil)
	require.Empty(t, answer(nodes).Code, "the frontend asks for the node view")

	// Through node 8's subject: the server refuses, on node7's connection.
	spoof := codecReport(8, flowState{StateSize: map[uint32]uint64{9: 999}}) // would drop flow 8, add flow 9
	require.NoError(t, node7.nc.Publish(node7.heartbeatSubject(8), spoof))
	select {
	case err := <-asyncErrs:
		require.True(t, errors.Is(err, nats.ErrPermissionViolation), "async error %v", err)
		assert.Contains(t, err.Error(), `"flow.heartbeat.8"`)
	case <-time.After(messageTimeout):
		require.FailNow(t, "no permissions violation on node7's connection", "within %v", messageTimeout)
	}
	assert.Equal(t, acked, frontend.requireState(node8State), "node 8's state after the refused publish")

	// Through its own subject, claiming node_id 8: the worker rejects it.
	r := node7.reject(node7.heartbeatSubject(7), spoof)
	assert.Equal(t, "400", r.Code)
	assert.Contains(t, r.Reason, "node_id")
	assert.Equal(t, acked, frontend.requireState(node8State), "node 8's state after the rejected report")

	// Its own report, on its own subject, is applied.
	node7State := flowState{StateSize: map[uint32]uint64{7: 700}, LastExecTime: map[uint32]int64{7: 1700000000007}}
	ack7 := node7.report(7, codecReport(7, node7State))
	assert.Greater(t, ack7.Revision, acked.Revision)
	assert.Equal(t, ack7, frontend.requireState(aggregateOf(map[uint64]flowState{7: node7State, 8: node8State})))

	select {
	case err := <-asyncErrs:
		assert.NoError(t, err, "another async error on node7's connection")
	default:
	}
	assert.Empty(t, linesMatching(w.Stderr(), workerErrorLine), "worker errors: its permissions are enough")
}

// TestWorkerWithoutHeartbeatPermissionExitsWithAReason shows that a worker
// the server does not let subscribe to heartbeats does not stay up deaf: it
// says why and exits 1.
func TestWorkerWithoutHeartbeatPermissionExitsWithAReason(t *testing.T) {
	t.Parallel()
	conf := `authorization {
  users = [
    {user: worker, password: "worker-secret", permissions: {
      publish: {allow: ["flow.state", "_INBOX.>"]}
      subscribe: {allow: ["flow.state.get", "flow.state.nodes", "$SRV.>"]}
    }}
  ]
}
`
	srv := startConfServer(t, "nats", conf, nats.UserInfo("worker", "worker-secret"))
	w := launchWorker(t, []string{"FLOWSTATE_NATS_PASSWORD=worker-secret"},
		"--nats-url", srv.URL, "--nats-user", "worker")
	w.killed = true // it is expected to exit by itself, with 1
	code, ok := w.p.wait(messageTimeout)
	require.True(t, ok, "the worker stayed up without its heartbeat subscription")
	assert.Equal(t, 1, code)
	assert.Contains(t, w.Stderr(), "refuses the heartbeat subscription")
}

// jetStreamWorkerConf is permissionsConf's worker with --kv jetstream: it
// also manages and writes its bucket (flow_state) through the JetStream API,
// and watches it with an ordered consumer (deliveries to an inbox, flow
// control replies). docs/operating.md's Security section shows it.
const jetStreamWorkerConf = `jetstream {store_dir: %q}
authorization {
  users = [
    {user: worker, password: "worker-secret", permissions: {
      publish: {allow: ["flow.state", "flow.state.delta", "_INBOX.>", "$SRV.INFO.flowstate", "$JS.API.>", "$KV.flow_state.>", "$JS.FC.>"]}
      subscribe: {allow: ["flow.heartbeat.*", "flow.state.get", "flow.state.nodes", "$SRV.>", "_INBOX.>"]}
    }}
    {user: frontend, password: "frontend-secret", permissions: {
      publish: {allow: ["flow.state.get", "flow.state.nodes", "flow.heartbeat.*"]}
      subscribe: {allow: ["_INBOX.>", "flow.state", "flow.state.delta"]}
    }}
  ]
}
`

// TestPermissionsOfAJetStreamWorker runs a --kv jetstream worker with
// only jetStreamWorkerConf's permissions: it creates its bucket, acks
// reports it stored, publishes and answers gets, and logs no error.
func TestPermissionsOfAJetStreamWorker(t *testing.T) {
	t.Parallel()
	frontendOpt := nats.UserInfo("frontend", "frontend-secret")
	srv := startConfServer(t, "nats", fmt.Sprintf(jetStreamWorkerConf, t.TempDir()), frontendOpt)
	w := launchWorker(t, []string{"FLOWSTATE_NATS_PASSWORD=worker-secret"},
		"--nats-url", srv.URL, "--nats-user", "worker", "--kv", "jetstream", "--publish-interval", "0")
	c := dialClient(t, w, frontendOpt) // a node too, for brevity
	awaitServing(t, w, c)
	u := c.subscribeUpdates()
	s := flowState{StateSize: map[uint32]uint64{7: 700}}
	ack := c.report(7, codecReport(7, s))
	assert.Equal(t, ack, c.requireState(s))
	for u.next().Revision < ack.Revision {
	}
	assert.Empty(t, linesMatching(w.Stderr(), workerErrorLine), "worker errors: its permissions are enough")
	assert.NotContains(t, w.Stderr(), "ermission", "no permissions violation")
}

// TestPermissionsKeepAllButTheWorkersFromWritingTheBucket: with
// jetStreamWorkerConf only the workers write $KV.flow_state.> and use the
// JetStream API; a frontend's (or a flownode's) write of a node's key, or
// its purge of the bucket, is refused by the server, and the state stays
// as it was.
func TestPermissionsKeepAllButTheWorkersFromWritingTheBucket(t *testing.T) {
	t.Parallel()
	asyncErrs := make(chan error, 16)
	frontendOpt := nats.UserInfo("frontend", "frontend-secret")
	srv := startConfServer(t, "nats", fmt.Sprintf(jetStreamWorkerConf, t.TempDir()), frontendOpt)
	w := launchWorker(t, []string{"FLOWSTATE_NATS_PASSWORD=worker-secret"},
		"--nats-url", srv.URL, "--nats-user", "worker", "--kv", "jetstream", "--publish-interval", "0")
	c := dialClient(t, w, frontendOpt, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case asyncErrs <- err:
		default:
		}
	}))
	awaitServing(t, w, c)
	s := flowState{StateSize: map[uint32]uint64{7: 700}}
	acked := c.report(7, codecReport(7, s))

	for _, subject := range []string{
		"$KV." + jsBucket + ".__flow/state/node/7", // a node's value
		"$KV." + jsBucket + ".__flow/state/node/8", // a new node
		"$JS.API.STREAM.PURGE.KV_" + jsBucket,      // a wipe
		"$JS.API.STREAM.DELETE.KV_" + jsBucket,     // another
		"$JS.API.STREAM.MSG.DELETE.KV_" + jsBucket, // one write
		"$KV." + jsBucket + "." + jsPublishKey,     // the publisher lease
		"$KV." + jsBucket + "." + jsStateKey,       // the aggregate key
	} {
		require.NoError(t, c.nc.Publish(subject, []byte("not json")))
		select {
		case err := <-asyncErrs:
			require.ErrorIs(t, err, nats.ErrPermissionViolation, subject)
		case <-time.After(messageTimeout):
			require.FailNow(t, "no permissions violation", "for %s within %v", subject, messageTimeout)
		}
	}
	assert.Equal(t, acked, c.requireState(s), "the state after the refused writes")
}
