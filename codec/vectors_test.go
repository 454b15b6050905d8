package codec

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
)

// The shared test vectors (testdata/vectors at the repository root) are
// the source of truth for every implementation of the wire format: this
// package, the JavaScript conformance client (e2e/js/vectors.mjs) and the
// Rust crate (clients/rust/tests/vectors.rs) read them. They are generated
// from this codec by vectors_gen_test.go: `go test ./codec/ -run
// TestVectorsAreTheCodecs -update` rewrites them; without -update the test
// requires the committed files to equal what the codec writes.

var updateVectors = flag.Bool("update", false, "rewrite testdata/vectors from the codec")

// vectorsDir is the vectors folder, relative to this package.
const vectorsDir = "../testdata/vectors"

// vFlow is a flow in the vectors: its id and the fields it has, each a
// decimal string (JSON numbers past 2^53 do not survive JavaScript); a flow
// with no field is one that left the aggregate (deltas only).
type vFlow struct {
	ID           uint32  `json:"id"`
	StateSize    *string `json:"state_size,omitempty"`
	LastExecTime *string `json:"last_exec_time,omitempty"`
	StartTime    *string `json:"start_time,omitempty"`
}

type reportFile struct {
	Comment  string       `json:"comment"`
	MaxFlows int          `json:"max_flows"`
	Cases    []reportCase `json:"cases"`
}

type reportCase struct {
	Name string `json:"name"`
	// Node is the node id of the subject to send the report on.
	Node    string `json:"node"`
	Msgpack string `json:"msgpack"`
	// Canonical reports are the bytes an encoder of this format writes for
	// Accepted: field order node_id, node_epoch (when set), state_size,
	// last_exec_time_map, start_time_map, integer ids ascending, shortest
	// integers.
	Canonical bool            `json:"canonical"`
	Accepted  *reportAccepted `json:"accepted,omitempty"`
	Rejected  *reportRejected `json:"rejected,omitempty"`
}

type reportAccepted struct {
	NodeID    string  `json:"node_id"`
	NodeEpoch *string `json:"node_epoch,omitempty"`
	Flows     []vFlow `json:"flows"`
}

type reportRejected struct {
	Code  int    `json:"code"`
	Kind  string `json:"kind"`
	Field string `json:"field"`
	// Error is the worker's Nats-Service-Error for this report.
	Error string `json:"error"`
}

type aggregateFile struct {
	Comment string          `json:"comment"`
	Cases   []aggregateCase `json:"cases"`
}

type aggregateCase struct {
	Name    string  `json:"name"`
	Flows   []vFlow `json:"flows"`
	Msgpack string  `json:"msgpack"`
	JSON    string  `json:"json"`
}

type deltaFile struct {
	Comment string      `json:"comment"`
	Cases   []deltaCase `json:"cases"`
}

type deltaCase struct {
	Name    string  `json:"name"`
	Base    string  `json:"base"`
	Flows   []vFlow `json:"flows"`
	Msgpack string  `json:"msgpack"`
}

type chunkFile struct {
	Comment string      `json:"comment"`
	Cases   []chunkCase `json:"cases"`
}

type chunkCase struct {
	Name   string   `json:"name"`
	Budget int      `json:"budget"`
	Flows  []vFlow  `json:"flows"`
	Chunks []string `json:"chunks"`
}

func u64s(v uint64) *string { s := strconv.FormatUint(v, 10); return &s }
func i64s(v int64) *string  { s := strconv.FormatInt(v, 10); return &s }

func toVFlows(flows []flowstate.Flow) []vFlow {
	out := make([]vFlow, 0, len(flows))
	for _, f := range flows {
		v := vFlow{ID: uint32(f.ID)}
		if f.Has&hasSize != 0 {
			v.StateSize = u64s(f.StateSize)
		}
		if f.Has&hasLast != 0 {
			v.LastExecTime = i64s(f.LastExecTime)
		}
		if f.Has&hasStart != 0 {
			v.StartTime = i64s(f.StartTime)
		}
		out = append(out, v)
	}
	return out
}

func fromVFlows(tb testing.TB, vs []vFlow) []flowstate.Flow {
	tb.Helper()
	out := make([]flowstate.Flow, 0, len(vs))
	for _, v := range vs {
		f := flowstate.Flow{ID: flowstate.FlowID(v.ID)}
		var err error
		if v.StateSize != nil {
			f.Has |= hasSize
			f.StateSize, err = strconv.ParseUint(*v.StateSize, 10, 64)
			require.NoError(tb, err, "flow %d state_size", v.ID)
		}
		if v.LastExecTime != nil {
			f.Has |= hasLast
			f.LastExecTime, err = strconv.ParseInt(*v.LastExecTime, 10, 64)
			require.NoError(tb, err, "flow %d last_exec_time", v.ID)
		}
		if v.StartTime != nil {
			f.Has |= hasStart
			f.StartTime, err = strconv.ParseInt(*v.StartTime, 10, 64)
			require.NoError(tb, err, "flow %d start_time", v.ID)
		}
		out = append(out, f)
	}
	return out
}

func unhex(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := hex.DecodeString(s)
	require.NoError(tb, err)
	return b
}

// readVectors parses the committed file name into v.
func readVectors(tb testing.TB, name string, v any) {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(vectorsDir, name))
	require.NoError(tb, err, "the shared vectors; regenerate them with `go test ./codec/ -run TestVectorsAreTheCodecs -update`")
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	require.NoError(tb, dec.Decode(v), name)
}

// TestVectorsAreTheCodecs requires each committed vector file to be what
// the codec writes for the cases of vectors_gen_test.go, byte for byte
// (with -update, it writes them).
func TestVectorsAreTheCodecs(t *testing.T) {
	for name, content := range generateVectors(t) {
		path := filepath.Join(vectorsDir, name)
		if *updateVectors {
			require.NoError(t, os.MkdirAll(vectorsDir, 0o755))
			require.NoError(t, os.WriteFile(path, content, 0o644))
			continue
		}
		got, err := os.ReadFile(path)
		require.NoError(t, err, "regenerate the vectors with `go test ./codec/ -run TestVectorsAreTheCodecs -update`")
		assert.Equal(t, string(content), string(got), "%s differs from what the codec writes: if the codec is right, regenerate with -update and update the other clients", name)
	}
}

// TestCodecReadsReportVectors decodes every report vector with the limits
// of the file and requires its expected result; a canonical one must also
// be what AppendReport writes.
func TestCodecReadsReportVectors(t *testing.T) {
	var f reportFile
	readVectors(t, "reports.json", &f)
	require.NotEmpty(t, f.Cases)
	d := Decoder{MaxFlows: f.MaxFlows}
	for _, tc := range f.Cases {
		body := unhex(t, tc.Msgpack)
		r, err := decodeReport(t, &d, body)
		if tc.Rejected != nil {
			assertRejected(t, tc.Rejected, err, tc.Name)
			continue
		}
		require.NoError(t, err, tc.Name)
		require.NotNil(t, tc.Accepted, tc.Name)
		want := acceptedReport(t, tc.Accepted.NodeID, tc.Accepted.NodeEpoch, tc.Accepted.Flows)
		assert.Equal(t, normal(want), normal(r), tc.Name)
		assert.Equal(t, tc.Accepted.NodeID, tc.Node, "%s: sent on its own node's subject", tc.Name)
		if tc.Canonical {
			assert.Equal(t, tc.Msgpack, hex.EncodeToString(AppendReport(nil, &want)), tc.Name)
		}
	}
}

// TestCodecReadsAggregateVectors requires both encodings of each aggregate
// vector and decodes them back.
func TestCodecReadsAggregateVectors(t *testing.T) {
	var f aggregateFile
	readVectors(t, "aggregates.json", &f)
	require.NotEmpty(t, f.Cases)
	for _, tc := range f.Cases {
		flows := fromVFlows(t, tc.Flows)
		assert.Equal(t, tc.Msgpack, hex.EncodeToString(AppendAggregate(nil, flows)), tc.Name)
		assert.Equal(t, tc.JSON, string(flowstate.AppendJSON(nil, flows)), tc.Name)
		v, err := DecodeAggregate(unhex(t, tc.Msgpack))
		require.NoError(t, err, tc.Name)
		assert.True(t, v.Equal(flowstate.ValueOf(flows)), tc.Name)
		got, err := flowstate.AppendValueFlows(nil, []byte(tc.JSON))
		require.NoError(t, err, tc.Name)
		assert.Equal(t, normalFlows(flows), normalFlows(got), tc.Name)
	}
}

// TestCodecReadsDeltaVectors requires the bytes of each delta vector and
// decodes them back.
func TestCodecReadsDeltaVectors(t *testing.T) {
	var f deltaFile
	readVectors(t, "deltas.json", &f)
	require.NotEmpty(t, f.Cases)
	for _, tc := range f.Cases {
		base, err := strconv.ParseUint(tc.Base, 10, 64)
		require.NoError(t, err)
		flows := fromVFlows(t, tc.Flows)
		assert.Equal(t, tc.Msgpack, hex.EncodeToString(AppendDelta(nil, base, flows)), tc.Name)
		gotBase, got, err := DecodeDelta(unhex(t, tc.Msgpack), nil)
		require.NoError(t, err, tc.Name)
		assert.Equal(t, base, gotBase, tc.Name)
		assert.Equal(t, normalFlows(flows), normalFlows(got), tc.Name)
	}
}

// TestCodecReadsChunkVectors requires SplitAggregate to cut each chunk
// vector's aggregate where the vector does, into the same bytes.
func TestCodecReadsChunkVectors(t *testing.T) {
	var f chunkFile
	readVectors(t, "chunks.json", &f)
	require.NotEmpty(t, f.Cases)
	for _, tc := range f.Cases {
		flows := fromVFlows(t, tc.Flows)
		ends, err := SplitAggregate(nil, flows, tc.Budget)
		require.NoError(t, err, tc.Name)
		var got []string
		start := 0
		for _, end := range ends {
			got = append(got, hex.EncodeToString(AppendAggregate(nil, flows[start:end])))
			start = end
		}
		assert.Equal(t, tc.Chunks, got, tc.Name)
		for i, c := range tc.Chunks {
			assert.LessOrEqual(t, len(c)/2, tc.Budget, "%s: chunk %d", tc.Name, i+1)
		}
	}
}

// normalFlows makes an empty list nil.
func normalFlows(flows []flowstate.Flow) []flowstate.Flow {
	if len(flows) == 0 {
		return nil
	}
	return flows
}
