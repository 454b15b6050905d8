package client

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/protocol"
)

// hostileVectors is testdata/vectors/hostile.json: replies a peer that is
// not the worker could send, read the same way by the Go client, the Rust
// crate and the JavaScript client.
type hostileVectors struct {
	MaxChunks    int `json:"max_chunks"`
	ChunkHeaders []struct {
		Header string `json:"header"`
		I, N   int
	} `json:"chunk_headers"`
	ErrorCodes []struct {
		Code string `json:"code"`
		Want int    `json:"want"`
	} `json:"error_codes"`
	Reasons []struct {
		Reason string `json:"reason"`
		Repeat int    `json:"repeat"`
		Want   string `json:"want"`
	} `json:"reasons"`
}

func readHostileVectors(t *testing.T) hostileVectors {
	b, err := os.ReadFile(filepath.Join("..", "testdata", "vectors", "hostile.json"))
	require.NoError(t, err)
	var v hostileVectors
	require.NoError(t, json.Unmarshal(b, &v))
	require.NotEmpty(t, v.ChunkHeaders)
	return v
}

func TestHostileVectors(t *testing.T) {
	v := readHostileVectors(t)
	assert.Equal(t, maxChunks, v.MaxChunks)
	for _, c := range v.ChunkHeaders {
		i, n, err := parseChunk(c.Header)
		if c.N == 0 {
			assert.ErrorIs(t, err, ErrBadReply, "%q is refused", c.Header)
			continue
		}
		if assert.NoError(t, err, "%q", c.Header) {
			assert.Equal(t, [2]int{c.I, c.N}, [2]int{i, n}, "%q", c.Header)
		}
	}
	for _, c := range v.ErrorCodes {
		assert.Equal(t, c.Want, newServiceError("s", c.Code, "r").Code, "code %q", c.Code)
	}
	for _, c := range v.Reasons {
		reason := c.Reason
		if c.Repeat > 0 {
			reason = strings.Repeat(reason, c.Repeat)
		}
		assert.Equal(t, c.Want, newServiceError("s", "500", reason).Reason, "reason %.40q", reason)
	}
}

// hostileFlow is a flow of hostile.json: values as decimal strings, a
// field the flow lacks left out.
type hostileFlow struct {
	ID           flowstate.FlowID `json:"id"`
	StateSize    *string          `json:"state_size"`
	LastExecTime *string          `json:"last_exec_time"`
	StartTime    *string          `json:"start_time"`
}

func (f hostileFlow) flow(t *testing.T) flowstate.Flow {
	out := flowstate.Flow{ID: f.ID}
	if f.StateSize != nil {
		v, err := strconv.ParseUint(*f.StateSize, 10, 64)
		require.NoError(t, err)
		out.StateSize, out.Has = v, out.Has|flowstate.HasStateSize
	}
	for _, p := range []struct {
		s   *string
		dst *int64
		bit flowstate.Fields
	}{{f.LastExecTime, &out.LastExecTime, flowstate.HasLastExecTime}, {f.StartTime, &out.StartTime, flowstate.HasStartTime}} {
		if p.s != nil {
			v, err := strconv.ParseInt(*p.s, 10, 64)
			require.NoError(t, err)
			*p.dst, out.Has = v, out.Has|p.bit
		}
	}
	return out
}

// hostileCase is a case of hostile.json's bodies, deltas or headers.
type hostileCase struct {
	Name     string            `json:"name"`
	Headers  map[string]string `json:"headers"`
	Msgpack  string            `json:"msgpack"`
	Refused  string            `json:"refused"`
	Flows    []hostileFlow     `json:"flows"`
	Base     string            `json:"base"`
	Epoch    string            `json:"epoch"`
	Revision string            `json:"revision"`
}

func (c hostileCase) msg(t *testing.T) *nats.Msg {
	data, err := hex.DecodeString(c.Msgpack)
	require.NoError(t, err, c.Name)
	h := nats.Header{}
	for k, v := range c.Headers {
		h[k] = []string{v}
	}
	return &nats.Msg{Header: h, Data: data}
}

func (c hostileCase) flows(t *testing.T) []flowstate.Flow {
	out := []flowstate.Flow{}
	for _, f := range c.Flows {
		out = append(out, f.flow(t))
	}
	return out
}

func readHostileCases(t *testing.T) (bodies, deltas, headers []hostileCase) {
	b, err := os.ReadFile(filepath.Join("..", "testdata", "vectors", "hostile.json"))
	require.NoError(t, err)
	var v struct {
		Bodies  []hostileCase `json:"bodies"`
		Deltas  []hostileCase `json:"deltas"`
		Headers []hostileCase `json:"headers"`
	}
	require.NoError(t, json.Unmarshal(b, &v))
	require.NotEmpty(t, v.Bodies)
	require.NotEmpty(t, v.Deltas)
	require.NotEmpty(t, v.Headers)
	return v.Bodies, v.Deltas, v.Headers
}

func TestHostileBodyVectors(t *testing.T) {
	bodies, _, _ := readHostileCases(t)
	for _, c := range bodies {
		msg := c.msg(t)
		msg.Header.Set(protocol.HeaderEpoch, "e1")
		msg.Header.Set(protocol.HeaderRevision, "1")
		s, err := decodeState(msg)
		if c.Refused != "" {
			require.Equal(t, "bad_reply", c.Refused, c.Name)
			assert.ErrorIs(t, err, ErrBadReply, c.Name)
			continue
		}
		if assert.NoError(t, err, c.Name) {
			assert.Equal(t, c.flows(t), append([]flowstate.Flow{}, s.Value.Flows()...), c.Name)
		}
	}
}

func TestHostileDeltaVectors(t *testing.T) {
	_, deltas, _ := readHostileCases(t)
	for _, c := range deltas {
		base, flows, err := readDelta(c.msg(t), nil)
		if c.Refused != "" {
			require.Equal(t, "snapshot", c.Refused, c.Name)
			assert.Error(t, err, c.Name)
			continue
		}
		if assert.NoError(t, err, c.Name) {
			assert.Equal(t, c.Base, strconv.FormatUint(base, 10), c.Name)
			assert.Equal(t, c.flows(t), append([]flowstate.Flow{}, flows...), c.Name)
		}
	}
}

func TestHostileHeaderVectors(t *testing.T) {
	_, _, headers := readHostileCases(t)
	for _, c := range headers {
		v, err := parseVersion(c.msg(t).Header)
		if c.Refused != "" {
			require.Equal(t, "bad_reply", c.Refused, c.Name)
			assert.ErrorIs(t, err, ErrBadReply, c.Name)
			continue
		}
		if assert.NoError(t, err, c.Name) {
			assert.Equal(t, c.Epoch, v.Epoch, c.Name)
			assert.Equal(t, c.Revision, strconv.FormatUint(v.Revision, 10), c.Name)
		}
	}
}
