package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/flowstate-io/flowstate/internal/clock"
)

// ErrNotEnabled is wrapped by the error of Open (a *NotEnabledError) when
// the NATS server, or the connection's account, has no JetStream: waiting
// would not help.
var ErrNotEnabled = errors.New("jetstream: not enabled")

// NotEnabledError says what has no JetStream. Its message is one line that
// says how to enable it.
type NotEnabledError struct {
	// Account is true when the server has JetStream but the account of
	// the connection does not.
	Account bool
	// Server names the connected server: its name and version.
	Server string
}

func (e *NotEnabledError) Error() string {
	if e.Account {
		return fmt.Sprintf("JetStream is not enabled for the worker's account on %s: enable it for the account (jetstream: enabled, or account limits in the server's configuration)", e.Server)
	}
	return fmt.Sprintf("%s has no JetStream: start nats-server with -js (or a jetstream {} block in its configuration), or enable JetStream for the worker's account; "+
		"a server whose JetStream was disabled by a failed store (a full disk, see its log) answers the same until it is restarted", e.Server)
}

// Unwrap returns ErrNotEnabled.
func (e *NotEnabledError) Unwrap() error { return ErrNotEnabled }

// notEnabledChecks is how many times the JetStream API must say it is not
// there, notEnabledPause apart, before Open believes it: a server of a
// cluster that has just formed may not know of another's API yet.
const (
	notEnabledChecks = 3
	notEnabledPause  = 250 * time.Millisecond
)

// checkEnabled asks the JetStream API for the account's information: no
// responders, or an answer saying JetStream is not enabled, is a
// *NotEnabledError. Any other outcome (an answer, a timeout, a cluster
// still electing its meta leader) passes: Open's retries decide.
func (s *Store) checkEnabled(ctx context.Context) error {
	for i := range notEnabledChecks {
		if !s.nc.IsConnected() {
			return nil // nothing to tell yet
		}
		actx, cancel := s.opContext(ctx)
		_, err := s.js.AccountInfo(actx)
		cancel()
		switch {
		case errors.Is(err, natsjs.ErrJetStreamNotEnabledForAccount):
			return &NotEnabledError{Account: true, Server: s.serverName()}
		case !errors.Is(err, natsjs.ErrJetStreamNotEnabled):
			return nil
		case i == notEnabledChecks-1:
			return &NotEnabledError{Server: s.serverName()}
		}
		if clock.Sleep(ctx, s.cfg.Clock, notEnabledPause) != nil {
			return nil
		}
	}
	return nil
}

// serverName names the connected server for a message.
func (s *Store) serverName() string {
	name := "nats-server " + s.nc.ConnectedServerVersion()
	if n := s.nc.ConnectedServerName(); n != "" && n != s.nc.ConnectedServerId() {
		name += " (" + n + ")"
	}
	return name + " at " + s.nc.ConnectedUrlRedacted()
}
