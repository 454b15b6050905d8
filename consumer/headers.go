package consumer

import (
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"flowstate/flowstate"
)

// Header names of PROTOCOL.md.
const (
	HeaderRevision    = "Flow-State-Revision"
	HeaderEpoch       = "Flow-State-Epoch"
	HeaderContentType = "Content-Type"
	HeaderAccept      = "Accept"

	// Headers of a dead-lettered report.
	HeaderRejectKind    = "Flow-State-Reject-Reason"  // the counted reason, e.g. bad_flow_id
	HeaderRejectError   = "Flow-State-Reject-Error"   // the one-line description
	HeaderRejectSubject = "Flow-State-Reject-Subject" // the subject the report came on

	ContentTypeMsgpack = "application/msgpack"
	ContentTypeJSON    = "application/json"
)

// versionHeader returns the headers that name a state version.
func versionHeader(v flowstate.Version) nats.Header {
	return nats.Header{
		HeaderEpoch:    []string{v.Epoch},
		HeaderRevision: []string{strconv.FormatUint(v.Revision, 10)},
	}
}

// errorHeader returns the NATS micro service error headers.
func errorHeader(code int, reason string) nats.Header {
	return nats.Header{
		micro.ErrorHeader:     []string{reason},
		micro.ErrorCodeHeader: []string{strconv.Itoa(code)},
	}
}
