package main

import (
	"context"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/internal/natstest"
	"github.com/flowstate-io/flowstate/state"
)

// TestSubcommandsAuthenticateFromTheEnvironment runs send and get against a
// server that requires a user and password: the password comes from
// FLOWSTATE_NATS_PASSWORD only, and without it the command says why.
func TestSubcommandsAuthenticateFromTheEnvironment(t *testing.T) {
	srv := natstest.Start(t, &server.Options{Username: "ops", Password: "s3cret"})
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("ops", "s3cret"))
	require.NoError(t, err)
	w, err := consumer.New(nc, state.NewManager(state.Options{}), consumer.Config{})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cliWait)
		defer cancel()
		assert.NoError(t, w.Shutdown(ctx))
		nc.Close()
	})
	env := func(k string) string {
		return map[string]string{"FLOWSTATE_NATS_URL": srv.ClientURL(), "FLOWSTATE_NATS_PASSWORD": "s3cret"}[k]
	}

	code, out, errOut := runCLI(t, env, "send", "--nats-user", "ops", "--node", "7", "--flow", "1:1024:1700000000000")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "applied at revision")
	code, out, errOut = runCLI(t, env, "get", "--json", "--nats-user", "ops")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, `{"state_size":{"1":1024},"last_exec_time_map":{"1":1700000000000},"start_time_map":{}}`+"\n", out)

	noPassword := func(k string) string {
		if k == "FLOWSTATE_NATS_PASSWORD" {
			return ""
		}
		return env(k)
	}
	code, _, errOut = runCLI(t, noPassword, "get", "--nats-user", "ops")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "FLOWSTATE_NATS_PASSWORD")
	code, _, errOut = runCLI(t, noPassword, "get")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "uthorization")
}
