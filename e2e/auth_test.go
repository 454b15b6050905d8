package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// authSetup is what one authentication mode needs: the server's
// configuration, and how the worker and a client authenticate.
type authSetup struct {
	conf       string        // nats-server configuration after the listen line
	workerArgs []string      // besides --nats-url
	workerEnv  []string      // secrets, which never go on the command line
	clientOpts []nats.Option // a frontend's credentials
	secret     string        // must not appear in the worker's arguments or log ("" if none)
}

// TestWorkerServesWithAuthentication runs nats-server requiring each kind
// of authentication a production cluster uses, and requires the worker,
// given the matching flags and environment, to serve: a report sent as a
// request is acked and a get returns it. A client without credentials is
// refused, so the server does require them.
func TestWorkerServesWithAuthentication(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode  string
		setup func(t *testing.T, dir string) authSetup
	}{
		{"credentials file (operator mode, JWTs)", credsSetup},
		{"nkey seed file", nkeySetup},
		{"user and password from the environment", passwordSetup},
		{"token from the environment", tokenSetup},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			a := tc.setup(t, t.TempDir())
			srv := startConfServer(t, "nats", a.conf, a.clientOpts...)
			require.ErrorIs(t, srv.connectErr(), nats.ErrAuthorization, "a client without credentials is refused")

			w := launchWorker(t, a.workerEnv, append([]string{"--nats-url", srv.URL}, a.workerArgs...)...)
			c := dialClient(t, w, a.clientOpts...)
			awaitServing(t, w, c)
			requireServes(t, c, 7)
			if a.secret != "" {
				requireNotOnCommandLine(t, w, a.secret)
			}
			assert.NotContains(t, w.Stderr(), "level=ERROR", "worker errors")
		})
	}
}

// credsSetup is operator mode: an operator signs an account, the account
// signs a user for the worker and one for the client, and the server
// resolves the account from memory. The worker reads a .creds file.
func credsSetup(t *testing.T, dir string) authSetup {
	operator, err := nkeys.CreateOperator()
	require.NoError(t, err)
	opub, err := operator.PublicKey()
	require.NoError(t, err)
	oc := jwt.NewOperatorClaims(opub)
	oc.Name = "flowstate-test-operator"
	ojwt, err := oc.Encode(operator)
	require.NoError(t, err)

	account, err := nkeys.CreateAccount()
	require.NoError(t, err)
	apub, err := account.PublicKey()
	require.NoError(t, err)
	ac := jwt.NewAccountClaims(apub)
	ac.Name = "flowstate"
	ajwt, err := ac.Encode(operator)
	require.NoError(t, err)

	userCreds := func(name string) string {
		user, err := nkeys.CreateUser()
		require.NoError(t, err)
		upub, err := user.PublicKey()
		require.NoError(t, err)
		uc := jwt.NewUserClaims(upub)
		uc.Name = name
		ujwt, err := uc.Encode(account)
		require.NoError(t, err)
		seed, err := user.Seed()
		require.NoError(t, err)
		creds, err := jwt.FormatUserConfig(ujwt, seed)
		require.NoError(t, err)
		path := filepath.Join(dir, name+".creds")
		writeFile(t, path, string(creds))
		return path
	}
	workerCreds, clientCreds := userCreds("worker"), userCreds("frontend")

	opFile := filepath.Join(dir, "operator.jwt")
	writeFile(t, opFile, ojwt)
	return authSetup{
		conf: fmt.Sprintf("operator: %q\nresolver: MEMORY\nresolver_preload: {\n  %s: %q\n}\n",
			opFile, apub, ajwt),
		workerArgs: []string{"--nats-creds", workerCreds},
		clientOpts: []nats.Option{nats.UserCredentials(clientCreds)},
	}
}

// nkeySetup lets two nkey users in; the worker reads its seed from a file.
func nkeySetup(t *testing.T, dir string) authSetup {
	user := func(name string) (pub, seedFile string) {
		kp, err := nkeys.CreateUser()
		require.NoError(t, err)
		pub, err = kp.PublicKey()
		require.NoError(t, err)
		seed, err := kp.Seed()
		require.NoError(t, err)
		seedFile = filepath.Join(dir, name+".nk")
		writeFile(t, seedFile, string(seed)+"\n")
		return pub, seedFile
	}
	workerPub, workerSeed := user("worker")
	clientPub, clientSeed := user("frontend")
	clientOpt, err := nats.NkeyOptionFromSeed(clientSeed)
	require.NoError(t, err)
	return authSetup{
		conf:       fmt.Sprintf("authorization {\n  users = [\n    {nkey: %s}\n    {nkey: %s}\n  ]\n}\n", workerPub, clientPub),
		workerArgs: []string{"--nats-nkey", workerSeed},
		clientOpts: []nats.Option{clientOpt},
	}
}

// passwordConf lets in the user flowstate with password, and frontend.
func passwordConf(password string) string {
	return fmt.Sprintf("authorization {\n  users = [\n    {user: flowstate, password: %q}\n    {user: frontend, password: \"frontend-secret\"}\n  ]\n}\n", password)
}

// frontendUser is the client's credentials in passwordConf.
var frontendUser = nats.UserInfo("frontend", "frontend-secret")

// passwordSetup: user flowstate, its password only in the environment.
func passwordSetup(*testing.T, string) authSetup {
	const password = "pw-Ohs3ahgh9ievoo"
	return authSetup{
		conf:       passwordConf(password),
		workerArgs: []string{"--nats-user", "flowstate"},
		workerEnv:  []string{"FLOWSTATE_NATS_PASSWORD=" + password},
		clientOpts: []nats.Option{frontendUser},
		secret:     password,
	}
}

// tokenConf lets in every client with token.
func tokenConf(token string) string {
	return fmt.Sprintf("authorization {\n  token: %q\n}\n", token)
}

// tokenSetup: one token for all, only in the environment.
func tokenSetup(*testing.T, string) authSetup {
	const token = "tok-ieWoh7aiJ4oozu"
	return authSetup{
		conf:       tokenConf(token),
		workerArgs: []string{"--nats-token"},
		workerEnv:  []string{"FLOWSTATE_NATS_TOKEN=" + token},
		clientOpts: []nats.Option{nats.Token(token)},
		secret:     token,
	}
}

// Lines of the refused attempts: the server logs one per connection it
// refuses; the worker logs its errors at level ERROR.
var (
	serverAuthError    = regexp.MustCompile(`authentication error`)
	workerErrorLine    = regexp.MustCompile(`level=ERROR`)
	workerAuthError    = regexp.MustCompile(`level=ERROR .*(?i:authorization violation)`)
	workerConnected    = regexp.MustCompile(`msg="NATS connected"`)
	workerReconnected  = regexp.MustCompile(`msg="NATS reconnected"`)
	workerDisconnected = regexp.MustCompile(`level=ERROR msg="NATS disconnected"`)
)

// observedRetries is how many refused attempts the wrong-credentials tests
// watch after the worker's first error line. The worker waits 0.5 s plus
// up to 0.25 s of jitter between attempts, so this is about 2.5 s.
const observedRetries = 4

// requireOneErrorWhileRefused waits for the worker's line about the
// refused authorization, then for observedRetries more attempts refused by
// the server (counted in the server's log, so that the test waits on
// attempts, not on a clock), and requires the worker to be up with exactly
// that one error line. A worker that logged per attempt would have logged
// the earlier of those attempts long before the server saw the next one
// (an attempt follows the previous one by at least 0.5 s).
func requireOneErrorWhileRefused(t *testing.T, srv *confServer, w *workerProc) {
	t.Helper()
	w.waitStderr(workerAuthError)
	seen := awaitCount(t, srv.p, serverAuthError, 1, startTimeout)
	awaitCount(t, srv.p, serverAuthError, seen+observedRetries, startTimeout)
	require.False(t, w.p.exited(), "the worker exited (code %d) instead of retrying; stderr:\n%s", w.p.code, w.Stderr())
	errs := linesMatching(w.Stderr(), workerErrorLine)
	require.Len(t, errs, 1, "one error line over %d refused attempts; stderr:\n%s", observedRetries+1, w.Stderr())
	assert.Regexp(t, workerAuthError, errs[0], "the error line says why")
}

// TestWrongPasswordLogsOnceRetriesAndConnectsAfterReload starts the worker
// with a password the server does not take. The worker stays up and keeps
// retrying with a single error line; once the server's configuration is
// reloaded with that password, the worker connects and serves without a
// restart. The password never appears on its command line or in its log.
func TestWrongPasswordLogsOnceRetriesAndConnectsAfterReload(t *testing.T) {
	t.Parallel()
	const oldPassword, newPassword = "pw-old-Eeph4ohb", "pw-new-Vo8zaeth"
	srv := startConfServer(t, "nats", passwordConf(oldPassword), frontendUser)
	w := launchWorker(t, []string{"FLOWSTATE_NATS_PASSWORD=" + newPassword},
		"--nats-url", srv.URL, "--nats-user", "flowstate")
	c := dialClient(t, w, frontendUser)

	requireOneErrorWhileRefused(t, srv, w)
	requireNotOnCommandLine(t, w, newPassword)

	srv.reload(passwordConf(newPassword))
	w.waitStderr(workerConnected)
	awaitServing(t, w, c)
	requireServes(t, c, 7)
	assert.Len(t, linesMatching(w.Stderr(), workerErrorLine), 1, "error lines after the reload")
	requireNotOnCommandLine(t, w, newPassword)
}

// TestWrongTokenLogsOnceRetriesAndConnectsAfterReload is the same with a
// token: one error line while the server refuses the worker's token, then
// the worker serves once the server takes it.
func TestWrongTokenLogsOnceRetriesAndConnectsAfterReload(t *testing.T) {
	t.Parallel()
	const oldToken, newToken = "tok-old-ooY7ieph", "tok-new-Ahd5uveo"
	srv := startConfServer(t, "nats", tokenConf(oldToken), nats.Token(oldToken))
	w := launchWorker(t, []string{"FLOWSTATE_NATS_TOKEN=" + newToken}, "--nats-url", srv.URL, "--nats-token")

	requireOneErrorWhileRefused(t, srv, w)
	requireNotOnCommandLine(t, w, newToken)

	srv.reload(tokenConf(newToken))
	w.waitStderr(workerConnected)
	c := dialClient(t, w, nats.Token(newToken))
	awaitServing(t, w, c)
	requireServes(t, c, 7)
	assert.Len(t, linesMatching(w.Stderr(), workerErrorLine), 1, "error lines after the reload")
}

// TestMissingCredentialFileExitsWithOneLine: a credentials, seed or
// certificate file that does not exist stops the worker at once with one
// line naming the file and a non-zero status; it is not retried forever.
func TestMissingCredentialFileExitsWithOneLine(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	missing := filepath.Join(t.TempDir(), "missing")
	for _, args := range [][]string{
		{"--nats-creds", missing},
		{"--nats-nkey", missing},
		{"--tls-ca", missing},
		{"--tls-cert", missing, "--tls-key", missing},
	} {
		t.Run(args[0], func(t *testing.T) {
			t.Parallel()
			code, _, stderr := runToExit(t, nil, append([]string{"--nats-url", srv.URL}, args...)...)
			assert.NotEqual(t, 0, code, "exit status; stderr:\n%s", stderr)
			assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line on stderr: %q", stderr)
			assert.Contains(t, stderr, missing, "the line names the file")
		})
	}
}

// TestWrongCredentialsWorkerStopsOnSigterm: a worker that the server has
// refused from the start has received nothing, so SIGTERM stops it at once
// with status 0, as it would a worker with nothing to drain.
func TestWrongCredentialsWorkerStopsOnSigterm(t *testing.T) {
	t.Parallel()
	srv := startConfServer(t, "nats", passwordConf("pw-right-aeSh8mee"), frontendUser)
	w := launchWorker(t, []string{"FLOWSTATE_NATS_PASSWORD=pw-wrong-Thoh4iec"}, "--nats-url", srv.URL, "--nats-user", "flowstate")
	w.waitStderr(workerAuthError)
	// At once: within a fifth of the bound that a worker with something
	// to drain is given (stopTimeout), enforced by the wait.
	code, exited := w.p.terminate(stopTimeout / 5)
	require.True(t, exited, "worker exits at once after SIGTERM, with nothing to drain; stderr:\n%s", w.Stderr())
	assert.Equal(t, 0, code, "exit status after SIGTERM; stderr:\n%s", w.Stderr())
	assert.Len(t, linesMatching(w.Stderr(), workerErrorLine), 1, "error lines; stderr:\n%s", w.Stderr())
}

// TestChangedPasswordLogsOnceAndRecoversAfterReload changes the password
// of a serving worker's user on the server: the server drops the worker and
// refuses its attempts. The worker logs one line about the refusal and one
// about the lost connection, then nothing more while the server keeps
// refusing it; once the old password is back, it reconnects and serves the
// same state at the same version.
func TestChangedPasswordLogsOnceAndRecoversAfterReload(t *testing.T) {
	t.Parallel()
	const password = "pw-Iequ9Ahl0ohz"
	srv := startConfServer(t, "nats", passwordConf(password), frontendUser)
	w := launchWorker(t, []string{"FLOWSTATE_NATS_PASSWORD=" + password}, "--nats-url", srv.URL, "--nats-user", "flowstate")
	c := dialClient(t, w, frontendUser)
	awaitServing(t, w, c)
	s := lastExec(map[uint32]int64{1: 1700000000001})
	ack := c.report(1, codecReport(1, s))
	require.Empty(t, linesMatching(w.Stderr(), workerErrorLine))

	srv.reload(passwordConf("pw-changed-Eir3ooqu"))
	// The server drops the worker's connection (one refusal in its log),
	// then refuses each attempt. After two refused attempts the worker's
	// lines about the first one are written (the next attempt comes 0.5 s
	// or more later); from then on, over observedRetries more attempts, it
	// must not log again.
	awaitCount(t, srv.p, serverAuthError, 3, startTimeout)
	logged := linesMatching(w.Stderr(), workerErrorLine)
	assert.Len(t, linesMatching(w.Stderr(), workerAuthError), 1, "one line says why; stderr:\n%s", w.Stderr())
	assert.Len(t, linesMatching(w.Stderr(), workerDisconnected), 1, "one line says the connection was lost; stderr:\n%s", w.Stderr())
	assert.Len(t, logged, 2, "error lines; stderr:\n%s", w.Stderr())
	awaitCount(t, srv.p, serverAuthError, 3+observedRetries, startTimeout)
	require.False(t, w.p.exited(), "the worker exited (code %d); stderr:\n%s", w.p.code, w.Stderr())
	assert.Equal(t, logged, linesMatching(w.Stderr(), workerErrorLine), "error lines over %d refused attempts", observedRetries)

	srv.reload(passwordConf(password))
	w.waitStderr(workerReconnected)
	awaitServing(t, w, c)
	assert.Equal(t, ack, c.requireState(s), "state and version after the reconnection")
}
