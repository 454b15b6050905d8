package client

import (
	"errors"
	"fmt"
)

// ErrNoWorker is wrapped by the errors of requests that no worker listened
// to (NATS "no responders"): the worker is down, or serves another prefix.
var ErrNoWorker = errors.New("client: no worker is serving")

// ErrBadReply is wrapped by the errors of replies and updates that break
// the protocol (missing version headers, an undecodable aggregate).
var ErrBadReply = errors.New("client: malformed reply from the worker")

// ServiceError is a request the worker answered with the NATS service error
// headers: Code is Nats-Service-Error-Code (400 for a rejected report, 413
// for an aggregate larger than the connection's max payload, 503 not ready,
// 500 anything else) and Reason is Nats-Service-Error.
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
