package client

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/flowstate-io/flowstate/flowstate"
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

// ErrLimit is wrapped by the errors of replies past one of the client's
// bounds (Options.MaxFlows, MaxGetBytes), and by the error a watch yields
// once when it dropped updates past Options.MaxPendingBytes.
var ErrLimit = errors.New("client: past a client limit")

// ServiceError is a request the worker answered with the NATS service error
// headers: Code is Nats-Service-Error-Code (400 for a rejected report, 409
// for a stale one, 413 for an aggregate larger than the connection's max
// payload, 503 not ready, 507 past a capacity limit, 500 anything else, a
// code that is not a number from 100 to 999 included) and Reason is
// Nats-Service-Error, cut to 1,024 bytes, its control characters escaped.
type ServiceError struct {
	Subject string // the request's subject
	Code    int
	Reason  string
}

// newServiceError returns the error of a reply with the service error
// headers code and reason: a code that is not three digits, 100 to 999, is
// 500 (anything else), and the reason is cleaned (cleanReason).
func newServiceError(subject, code, reason string) *ServiceError {
	code = strings.TrimSpace(code)
	n, err := strconv.Atoi(code)
	if err != nil || !canonicalUint(code) || n < 100 || n > 999 {
		n = 500
	}
	return &ServiceError{Subject: subject, Code: n, Reason: cleanReason(reason)}
}

// cleanReason returns a reason from a reply fit for a log line or a
// terminal: cut to at most 1,024 bytes at a character boundary (with "..."
// after it), each control character and each byte that is not UTF-8
// written as an escape (\x1b, \u0085).
func cleanReason(s string) string {
	cut := flowstate.CutMessage(s)
	var b strings.Builder
	for i := 0; i < len(cut); {
		r, n := utf8.DecodeRuneInString(cut[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, "\\x%02x", cut[i])
		case unicode.IsControl(r) && r < 0x80:
			fmt.Fprintf(&b, "\\x%02x", r)
		case unicode.IsControl(r):
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteString(cut[i : i+n])
		}
		i += n
	}
	if len(cut) < len(s) {
		b.WriteString("...")
	}
	return b.String()
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
