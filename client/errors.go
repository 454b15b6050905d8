package client

import (
	"errors"
	"fmt"
)

// ErrNoWorker is wrapped by the errors of requests that no worker listened
// to (NATS "no responders"): the worker is down, or serves another prefix.
var ErrNoWorker = errors.New("client: no worker is serving")

// ErrStale matches (errors.Is) a report the worker refused as stale (code
// 409): the state holds a later report of the same flownode process, or of
// a later process of the node, so this one changed nothing and sending it
// again will not help.
var ErrStale = errors.New("client: stale report")

// ErrBadReply is wrapped by the errors of replies and updates that break
// the protocol (missing version headers, an undecodable aggregate).
var ErrBadReply = errors.New("client: malformed reply from the worker")

// ServiceError is a request the worker answered with the NATS service error
// headers: Code is Nats-Service-Error-Code (400 for a rejected report, 409
// for a stale one, 413 for an aggregate larger than the connection's max
// payload, 503 not ready, 507 past a capacity limit, 500 anything else) and
// Reason is Nats-Service-Error.
type ServiceError struct {
	Subject string // the request's subject
	Code    int
	Reason  string
}

// Error returns one line with the subject, code and reason.
func (e *ServiceError) Error() string {
	return fmt.Sprintf("client: %s: worker answered %d: %s", e.Subject, e.Code, e.Reason)
}

// Rejected reports whether the worker refused the request as bad input
// (code 400): for a report, it changed nothing, and sending it again will
// not help.
func (e *ServiceError) Rejected() bool { return e.Code == 400 }

// Stale reports whether the worker refused the report as stale (code 409):
// a later report of its process is held already; it changed nothing.
func (e *ServiceError) Stale() bool { return e.Code == 409 }

// Is makes errors.Is(err, ErrStale) hold for a stale report's error.
func (e *ServiceError) Is(target error) bool { return target == ErrStale && e.Stale() }
