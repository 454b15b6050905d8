package consumer

import (
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/protocol"
)

// versionHeader returns the headers that name a state version.
func versionHeader(v flowstate.Version) nats.Header {
	return nats.Header{
		protocol.HeaderEpoch:    []string{v.Epoch},
		protocol.HeaderRevision: []string{strconv.FormatUint(v.Revision, 10)},
	}
}

// errorHeader returns the NATS micro service error headers.
func errorHeader(code int, reason string) nats.Header {
	return nats.Header{
		protocol.HeaderError:     []string{reason},
		protocol.HeaderErrorCode: []string{strconv.Itoa(code)},
	}
}
