package codec

import (
	"encoding/hex"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
)

// The v3 vectors: reports with health fields (reports_v3.json), stats views
// (stats.json) and stored node values (stored_values.json). They are files of
// their own, so that readers of the v1 and v2 files need no change.

// vHealth is a report's or a stored value's v3 part in the vectors: a map
// absent from the body is left out, an empty one is [].
type vHealth struct {
	ProcessedRows *[]vRows      `json:"processed_rows,omitempty"`
	LastErrors    *[]vErrorList `json:"last_errors,omitempty"`
	Seq           *string       `json:"seq,omitempty"`
	RetiredEpochs []string      `json:"retired_epochs,omitempty"`
}

type vRows struct {
	ID   uint32 `json:"id"`
	Rows string `json:"rows"`
}

type vErrorList struct {
	ID     uint32   `json:"id"`
	Errors []vError `json:"errors"`
}

// vError is an error; NodeID is set in the stats view only.
type vError struct {
	Time    string  `json:"time"`
	NodeID  *string `json:"node_id,omitempty"`
	Message string  `json:"message"`
}

func toVHealth(h *flowstate.Health) vHealth {
	var v vHealth
	if h.HasProcessedRows {
		rows := []vRows{}
		for _, f := range h.Flows {
			if f.Has&flowstate.HasProcessedRows != 0 {
				rows = append(rows, vRows{ID: uint32(f.ID), Rows: strconv.FormatUint(f.ProcessedRows, 10)})
			}
		}
		v.ProcessedRows = &rows
	}
	if h.HasLastErrors {
		lists := []vErrorList{}
		for _, f := range h.Flows {
			if f.Has&flowstate.HasLastErrors != 0 {
				l := vErrorList{ID: uint32(f.ID), Errors: []vError{}}
				for _, e := range f.LastErrors {
					l.Errors = append(l.Errors, vError{Time: strconv.FormatInt(e.Time, 10), Message: e.Message})
				}
				lists = append(lists, l)
			}
		}
		v.LastErrors = &lists
	}
	if h.HasSeq {
		v.Seq = u64s(h.Seq)
	}
	for _, e := range h.RetiredEpochs {
		v.RetiredEpochs = append(v.RetiredEpochs, strconv.FormatUint(e, 10))
	}
	return v
}

func fromVHealth(tb testing.TB, v vHealth) flowstate.Health {
	tb.Helper()
	var h flowstate.Health
	at := func(id uint32) *flowstate.FlowHealth {
		for i := range h.Flows {
			if h.Flows[i].ID == flowstate.FlowID(id) {
				return &h.Flows[i]
			}
		}
		h.Flows = append(h.Flows, flowstate.FlowHealth{ID: flowstate.FlowID(id)})
		return &h.Flows[len(h.Flows)-1]
	}
	if v.ProcessedRows != nil {
		h.HasProcessedRows = true
		for _, r := range *v.ProcessedRows {
			n, err := strconv.ParseUint(r.Rows, 10, 64)
			require.NoError(tb, err)
			f := at(r.ID)
			f.Has |= flowstate.HasProcessedRows
			f.ProcessedRows = n
		}
	}
	if v.LastErrors != nil {
		h.HasLastErrors = true
		for _, l := range *v.LastErrors {
			f := at(l.ID)
			f.Has |= flowstate.HasLastErrors
			f.LastErrors = []flowstate.FlowError{}
			for _, e := range l.Errors {
				t, err := strconv.ParseInt(e.Time, 10, 64)
				require.NoError(tb, err)
				f.LastErrors = append(f.LastErrors, flowstate.FlowError{Time: t, Message: e.Message})
			}
		}
	}
	if v.Seq != nil {
		h.HasSeq = true
		var err error
		h.Seq, err = strconv.ParseUint(*v.Seq, 10, 64)
		require.NoError(tb, err)
	}
	for _, s := range v.RetiredEpochs {
		e, err := strconv.ParseUint(s, 10, 64)
		require.NoError(tb, err)
		h.RetiredEpochs = append(h.RetiredEpochs, e)
	}
	sortHealth(h.Flows)
	return h
}

func sortHealth(flows []flowstate.FlowHealth) {
	for i := 1; i < len(flows); i++ {
		for j := i; j > 0 && flows[j-1].ID > flows[j].ID; j-- {
			flows[j-1], flows[j] = flows[j], flows[j-1]
		}
	}
}

type reportV3File struct {
	Comment  string         `json:"comment"`
	MaxFlows int            `json:"max_flows"`
	Cases    []reportV3Case `json:"cases"`
}

type reportV3Case struct {
	Name      string            `json:"name"`
	Node      string            `json:"node"`
	Msgpack   string            `json:"msgpack"`
	Canonical bool              `json:"canonical"`
	Accepted  *reportV3Accepted `json:"accepted,omitempty"`
	Rejected  *reportRejected   `json:"rejected,omitempty"`
}

type reportV3Accepted struct {
	NodeID    string  `json:"node_id"`
	NodeEpoch *string `json:"node_epoch,omitempty"`
	Flows     []vFlow `json:"flows"`
	Health    vHealth `json:"health"`
}

func errMaps(m *mp, errs ...flowstate.FlowError) *mp {
	m.Array(len(errs))
	for _, e := range errs {
		m.errMap(e.Time, e.Message)
	}
	return m
}

func reportV3Inputs() []reportInput {
	e := func(t int64, msg string) flowstate.FlowError { return flowstate.FlowError{Time: t, Message: msg} }
	canon := func(name string, r Report) reportInput {
		return reportInput{name: name, node: r.NodeID, body: AppendReport(nil, &r), canonical: true}
	}
	ok := func(name string, body []byte) reportInput { return reportInput{name: name, node: 1, body: body} }
	bad := func(name string, kind Kind, body []byte) reportInput {
		return reportInput{name: name, node: 1, body: body, want: kind}
	}
	errs := func(m *mp) *mp { return m.Str("last_errors").Map(1).Uint(7) }
	return []reportInput{
		canon("processed rows, last errors and seq", Report{NodeID: 7, NodeEpoch: 1_700_000_000_000, HasNodeEpoch: true,
			Flows: []flowstate.Flow{{ID: 1, Has: hasSize, StateSize: 1024}},
			Health: flowstate.Health{HasProcessedRows: true, HasLastErrors: true, HasSeq: true, Seq: 41,
				Flows: []flowstate.FlowHealth{
					{ID: 1, Has: flowstate.HasProcessedRows | flowstate.HasLastErrors, ProcessedRows: 52000,
						LastErrors: []flowstate.FlowError{e(1_700_000_000_000, "sink table missing"), e(1_699_999_999_000, "a \"quoted\" é/日本\n")}},
					{ID: 2, Has: flowstate.HasLastErrors, LastErrors: []flowstate.FlowError{}},
				}}}),
		canon("seq alone", Report{NodeID: 2, NodeEpoch: 5, HasNodeEpoch: true, Health: flowstate.Health{HasSeq: true, Seq: math.MaxUint64}}),
		canon("three errors of 1024 bytes, extreme values", Report{NodeID: 3, Health: flowstate.Health{HasProcessedRows: true, HasLastErrors: true,
			Flows: []flowstate.FlowHealth{{ID: math.MaxUint32, Has: flowstate.HasProcessedRows | flowstate.HasLastErrors, ProcessedRows: math.MaxUint64,
				LastErrors: []flowstate.FlowError{e(math.MaxInt64, strings.Repeat("x", 1024)), e(0, strings.Repeat("é", 512)), e(math.MinInt64, "m")}}}}}),
		ok("nil v3 fields are absent", node(4).Str("processed_rows").Nil().Str("last_errors").Nil().Str("seq").Nil().Bytes()),
		ok("string flow ids, unknown keys of an error ignored", node(3).Str("processed_rows").Map(2).Str("10").Uint(1).Str("2").U64(2).
			Str("last_errors").Map(1).Str("10").Array(1).Map(3).Str("code").Map(1).Str("a").F64(1).Str("message").Str("m").Str("time").I64(-5).Bytes()),
		bad("more than 3 errors for a flow", KindBadError, errMaps(errs(node(2)), e(1, "a"), e(1, "a"), e(1, "a"), e(1, "a")).Bytes()),
		bad("an error without time", KindBadError, errs(node(2)).Array(1).Map(1).Str("message").Str("a").Bytes()),
		bad("an error without message", KindBadError, errs(node(2)).Array(1).Map(1).Str("time").Int(1).Bytes()),
		bad("an empty message", KindBadError, errMaps(errs(node(2)), e(1, "")).Bytes()),
		bad("a message of 1025 bytes", KindBadError, errMaps(errs(node(2)), e(1, strings.Repeat("x", 1025))).Bytes()),
		bad("a message not valid UTF-8", KindBadError, errMaps(errs(node(2)), e(1, "a\xff")).Bytes()),
		bad("a time outside int64", KindOutOfRange, errs(node(2)).Array(1).Map(2).Str("time").U64(1<<63).Str("message").Str("a").Bytes()),
		bad("last_errors of a flow is not an array", KindBadType, errs(node(2)).Map(0).Bytes()),
		bad("negative processed rows", KindOutOfRange, node(2).Str("processed_rows").Map(1).Uint(7).Int(-1).Bytes()),
		bad("a flow named twice in processed_rows", KindDuplicateFlow, node(2).Str("processed_rows").Map(2).Uint(7).Uint(1).Str("7").Uint(1).Bytes()),
		bad("a flow id with a leading zero in last_errors", KindBadFlowID, node(2).Str("last_errors").Map(1).Str("07").Array(0).Bytes()),
		bad("negative seq", KindOutOfRange, node(2).Str("seq").Int(-1).Bytes()),
		bad("flows of processed_rows count toward --max-flows 4", KindTooManyFlows, node(3).
			Str("state_size").Map(3).Uint(1).Uint(1).Uint(2).Uint(1).Uint(3).Uint(1).
			Str("processed_rows").Map(3).Uint(3).Uint(1).Uint(5).Uint(1).Uint(6).Uint(1).Bytes()),
	}
}

type statsFile struct {
	Comment string      `json:"comment"`
	Cases   []statsCase `json:"cases"`
}

type statsNode struct {
	NodeID string  `json:"node_id"`
	Health vHealth `json:"health"`
}

type statsCase struct {
	Name string `json:"name"`
	// Flows is the seed's aggregate; Nodes the health of each node.
	Flows []vFlow     `json:"flows"`
	Nodes []statsNode `json:"nodes"`
	// Stats is the merged health: processed_rows as rows, last_errors
	// with node_id set.
	ProcessedRows []vRows      `json:"processed_rows"`
	LastErrors    []vErrorList `json:"last_errors"`
	Msgpack       string       `json:"msgpack"`
	JSON          string       `json:"json"`
	// Budget and Chunks: the view cut for a chunked get, when Budget > 0.
	Budget int      `json:"budget,omitempty"`
	Chunks []string `json:"chunks,omitempty"`
}

func statsInputs() []struct {
	name   string
	flows  []flowstate.Flow
	nodes  []flowstate.NodeHealth
	budget int
} {
	e := func(t int64, msg string) flowstate.FlowError { return flowstate.FlowError{Time: t, Message: msg} }
	both := flowstate.HasProcessedRows | flowstate.HasLastErrors
	h := func(flows ...flowstate.FlowHealth) *flowstate.Health {
		return &flowstate.Health{HasProcessedRows: true, HasLastErrors: true, Flows: flows}
	}
	var many []flowstate.FlowHealth
	for i := range 12 {
		many = append(many, flowstate.FlowHealth{ID: flowstate.FlowID(i * 10), Has: both, ProcessedRows: uint64(i) << 30,
			LastErrors: []flowstate.FlowError{e(int64(i), strings.Repeat("e", 20*i+1))}})
	}
	return []struct {
		name   string
		flows  []flowstate.Flow
		nodes  []flowstate.NodeHealth
		budget int
	}{
		{"empty", nil, nil, 0},
		{"the protocol's example", []flowstate.Flow{{ID: 1, Has: hasSize | hasLast, StateSize: 1024, LastExecTime: 1_700_000_000_000}},
			[]flowstate.NodeHealth{{NodeID: 7, Health: h(flowstate.FlowHealth{ID: 1, Has: both, ProcessedRows: 52000,
				LastErrors: []flowstate.FlowError{e(1_700_000_000_000, "sink table missing")}})}}, 0},
		{"max rows over nodes, 3 newest errors, ties by node id then the node's order", []flowstate.Flow{sizeFlow(2, 1), sizeFlow(10, 1)},
			[]flowstate.NodeHealth{
				{NodeID: 9, Health: h(flowstate.FlowHealth{ID: 10, Has: both, ProcessedRows: 5, LastErrors: []flowstate.FlowError{e(30, "n9 first"), e(10, "n9 old")}})},
				{NodeID: 2, Health: h(flowstate.FlowHealth{ID: 2, Has: flowstate.HasLastErrors, LastErrors: []flowstate.FlowError{}},
					flowstate.FlowHealth{ID: 10, Has: both, ProcessedRows: 99, LastErrors: []flowstate.FlowError{e(30, "n2 a"), e(30, "n2 b\t\"x\""), e(5, "n2 old")}})},
			}, 0},
		{"12 flows in chunks of at most 400 bytes", fullFlows(12), []flowstate.NodeHealth{{NodeID: 1, Health: h(many...)}}, 400},
	}
}

type storedFile struct {
	Comment string       `json:"comment"`
	Cases   []storedCase `json:"cases"`
}

type storedCase struct {
	Name string `json:"name"`
	// Valid says whether a worker applies the value; then Flows, NodeEpoch
	// and Health are what it holds.
	Valid     bool     `json:"valid"`
	Flows     []vFlow  `json:"flows,omitempty"`
	NodeEpoch *string  `json:"node_epoch,omitempty"`
	Health    *vHealth `json:"health,omitempty"`
	JSON      string   `json:"json"`
}

func storedInputs() []storedCase {
	v := func(name string, flows []flowstate.Flow, epoch *uint64, h flowstate.Health) storedCase {
		var e uint64
		if epoch != nil {
			e = *epoch
		}
		c := storedCase{Name: name, Valid: true, Flows: toVFlows(flows), JSON: string(flowstate.AppendNodeJSON(nil, flows, e, epoch != nil, &h))}
		stored := h.IsV3() || len(h.RetiredEpochs) > 0 // a value without v3 fields keeps its retired epochs
		if epoch != nil && stored {
			c.NodeEpoch = u64s(e)
		}
		vh := toVHealth(&h)
		if !stored {
			vh = vHealth{}
		}
		c.Health = &vh
		return c
	}
	epoch := uint64(1_700_000_000_000)
	const seed = `{"state_size":{},"last_exec_time_map":{},"start_time_map":{}`
	bad := func(name, tail string) storedCase { return storedCase{Name: name, JSON: seed + tail} }
	return []storedCase{
		v("the protocol's example", []flowstate.Flow{sizeFlow(1, 1024)}, &epoch,
			flowstate.Health{HasProcessedRows: true, HasSeq: true, Seq: 41,
				Flows: []flowstate.FlowHealth{{ID: 1, Has: flowstate.HasProcessedRows, ProcessedRows: 52000}}}),
		v("no v3 field: the seed's bytes", []flowstate.Flow{sizeFlow(1, 1024)}, &epoch, flowstate.Health{}),
		v("every field, escaped messages, retired epochs", []flowstate.Flow{lastFlow(2, -1)}, &epoch,
			flowstate.Health{HasProcessedRows: true, HasLastErrors: true, HasSeq: true, Seq: math.MaxUint64,
				Flows: []flowstate.FlowHealth{
					{ID: 2, Has: flowstate.HasLastErrors, LastErrors: []flowstate.FlowError{}},
					{ID: 10, Has: flowstate.HasProcessedRows | flowstate.HasLastErrors, ProcessedRows: 3,
						LastErrors: []flowstate.FlowError{{Time: 5, Message: "q\"b\\s/\x01\x1f\b\f\n\r\té日"}, {Time: math.MinInt64, Message: "x"}}},
				},
				RetiredEpochs: []uint64{1, 2}}),
		v("last_errors without node_epoch", nil, nil, flowstate.Health{HasLastErrors: true,
			Flows: []flowstate.FlowHealth{{ID: 4, Has: flowstate.HasLastErrors, LastErrors: []flowstate.FlowError{{Time: 1, Message: "m"}}}}}),
		bad("more than 3 errors", `,"last_errors":{"1":[{"time":1,"message":"a"},{"time":1,"message":"a"},{"time":1,"message":"a"},{"time":1,"message":"a"}]}}`),
		bad("an error without time", `,"last_errors":{"1":[{"message":"a"}]}}`),
		bad("an error without message", `,"last_errors":{"1":[{"time":1}]}}`),
		bad("an empty message", `,"last_errors":{"1":[{"time":1,"message":""}]}}`),
		bad("a message of 1025 bytes", `,"last_errors":{"1":[{"time":1,"message":"`+strings.Repeat("x", 1025)+`"}]}}`),
		bad("a time outside int64", `,"last_errors":{"1":[{"time":9223372036854775808,"message":"a"}]}}`),
		bad("negative processed rows", `,"processed_rows":{"1":-1}}`),
		bad("a flow id with a leading zero", `,"processed_rows":{"01":1}}`),
		bad("a flow named twice", `,"processed_rows":{"1":1,"1":2}}`),
		bad("a negative seq", `,"seq":-1}`),
		v("no v3 field, the node's retired epochs kept", []flowstate.Flow{sizeFlow(1, 1024)}, &epoch,
			flowstate.Health{RetiredEpochs: []uint64{1, 2}}),
		v("no v3 field and no node_epoch, a retired epoch kept", nil, nil, flowstate.Health{RetiredEpochs: []uint64{epoch}}),
		bad("more than 8 retired epochs", `,"node_epoch":10,"seq":1,"retired_epochs":[1,2,3,4,5,6,7,8,9]}`),
		bad("a retired epoch twice", `,"node_epoch":10,"seq":1,"retired_epochs":[1,1]}`),
		bad("its own node_epoch among the retired", `,"node_epoch":10,"seq":1,"retired_epochs":[10]}`),
		bad("seq without node_epoch", `,"processed_rows":{"1":1},"seq":5}`),
		bad("seq twice", `,"node_epoch":10,"seq":1,"seq":5}`),
		bad("a null error list", `,"last_errors":{"1":null}}`),
		bad("a lone surrogate escape", `,"last_errors":{"1":[{"time":1,"message":"a\ud800"}]}}`),
	}
}

// generateV3Vectors returns the v3 vector files, by name.
func generateV3Vectors(t *testing.T) map[string]any {
	t.Helper()
	d := Decoder{MaxFlows: vectorsMaxFlows}
	reports := reportV3File{
		Comment:  "Heartbeat reports with v3 fields (PROTOCOL.md v3, report fields), msgpack in hex, judged by a worker run with --max-flows max_flows, as in reports.json; accepted.health holds processed_rows, last_errors and seq, each left out when absent. A canonical report is what an encoder writes: node_id, node_epoch, the three maps, processed_rows, last_errors (each error a map of time and message), seq. Generated by `go test ./codec/ -run TestVectorsAreTheCodecs -update`.",
		MaxFlows: vectorsMaxFlows,
	}
	for _, in := range reportV3Inputs() {
		c := reportV3Case{Name: in.name, Node: strconv.FormatUint(in.node, 10), Msgpack: hex.EncodeToString(in.body), Canonical: in.canonical}
		r, err := decodeReport(t, &d, in.body)
		if in.want == "" {
			require.NoError(t, err, in.name)
			c.Accepted = &reportV3Accepted{NodeID: strconv.FormatUint(r.NodeID, 10), Flows: toVFlows(r.Flows), Health: toVHealth(&r.Health)}
			if r.HasNodeEpoch {
				c.Accepted.NodeEpoch = u64s(r.NodeEpoch)
			}
		} else {
			c.Rejected = rejectedOf(t, in, err)
		}
		reports.Cases = append(reports.Cases, c)
	}

	stats := statsFile{Comment: "Stats views (PROTOCOL.md v3, the stats view): the seed's aggregate (flows) and each node's health (nodes), the merged processed_rows and last_errors, the msgpack (hex) and the JSON; with budget, the view cut for a chunked get into chunks of at most budget bytes, each a stats view in msgpack (hex) of one ascending range of flow ids."}
	for _, in := range statsInputs() {
		merged := flowstate.MergeHealth(nil, in.nodes)
		c := statsCase{Name: in.name, Flows: toVFlows(in.flows), Nodes: []statsNode{}, ProcessedRows: []vRows{}, LastErrors: []vErrorList{},
			Msgpack: hex.EncodeToString(AppendStats(nil, in.flows, merged)), JSON: string(flowstate.AppendStatsJSON(nil, in.flows, merged))}
		for _, n := range in.nodes {
			c.Nodes = append(c.Nodes, statsNode{NodeID: strconv.FormatUint(n.NodeID, 10), Health: toVHealth(n.Health)})
		}
		for _, s := range merged {
			if s.Has&flowstate.HasProcessedRows != 0 {
				c.ProcessedRows = append(c.ProcessedRows, vRows{ID: uint32(s.ID), Rows: strconv.FormatUint(s.ProcessedRows, 10)})
			}
			if len(s.LastErrors) > 0 {
				l := vErrorList{ID: uint32(s.ID)}
				for _, e := range s.LastErrors {
					l.Errors = append(l.Errors, vError{Time: strconv.FormatInt(e.Time, 10), NodeID: u64s(e.NodeID), Message: e.Message})
				}
				c.LastErrors = append(c.LastErrors, l)
			}
		}
		if in.budget > 0 {
			c.Budget = in.budget
			ends, err := SplitStats(nil, in.flows, merged, in.budget)
			require.NoError(t, err, in.name)
			var prev StatsChunk
			for _, e := range ends {
				c.Chunks = append(c.Chunks, hex.EncodeToString(AppendStats(nil, in.flows[prev.Flows:e.Flows], merged[prev.Stats:e.Stats])))
				prev = e
			}
		}
		stats.Cases = append(stats.Cases, c)
	}

	stored := storedFile{Comment: "Stored node values (PROTOCOL.md, state store layout and what a worker applies from a shared store): the JSON under __flow/state/node/{node_id}. A valid value holds flows, node_epoch and health (processed_rows, last_errors, seq, retired_epochs, each left out when absent); an invalid one counts as no value."}
	stored.Cases = storedInputs()
	for _, c := range stored.Cases {
		_, err := flowstate.AppendValueFlows(nil, []byte(c.JSON))
		require.NoError(t, err, "%s: the seed reads every stored value", c.Name)
		var h flowstate.Health
		_, _, err = flowstate.DecodeNodeHealth([]byte(c.JSON), &h)
		require.Equal(t, c.Valid, err == nil, "%s: %v", c.Name, err)
	}
	return map[string]any{"reports_v3.json": reports, "stats.json": stats, "stored_values.json": stored}
}

// TestCodecReadsReportV3Vectors decodes every v3 report vector and requires
// its expected result; a canonical one must also be what AppendReport
// writes.
func TestCodecReadsReportV3Vectors(t *testing.T) {
	var f reportV3File
	readVectors(t, "reports_v3.json", &f)
	require.NotEmpty(t, f.Cases)
	d := Decoder{MaxFlows: f.MaxFlows}
	for _, tc := range f.Cases {
		r, err := decodeReport(t, &d, unhex(t, tc.Msgpack))
		if tc.Rejected != nil {
			assertRejected(t, tc.Rejected, err, tc.Name)
			continue
		}
		require.NoError(t, err, tc.Name)
		want := acceptedReport(t, tc.Accepted.NodeID, tc.Accepted.NodeEpoch, tc.Accepted.Flows)
		want.Health = fromVHealth(t, tc.Accepted.Health)
		assert.Equal(t, want.Health, r.Health, tc.Name)
		assert.Equal(t, normalFlows(want.Flows), normalFlows(r.Flows), tc.Name)
		if tc.Canonical {
			assert.Equal(t, tc.Msgpack, hex.EncodeToString(AppendReport(nil, &want)), tc.Name)
		}
	}
}

// TestCodecReadsStatsVectors merges each case's nodes and requires both
// encodings of the view and its chunks.
func TestCodecReadsStatsVectors(t *testing.T) {
	var f statsFile
	readVectors(t, "stats.json", &f)
	require.NotEmpty(t, f.Cases)
	for _, tc := range f.Cases {
		var nodes []flowstate.NodeHealth
		for _, n := range tc.Nodes {
			id, err := strconv.ParseUint(n.NodeID, 10, 64)
			require.NoError(t, err)
			h := fromVHealth(t, n.Health)
			nodes = append(nodes, flowstate.NodeHealth{NodeID: id, Health: &h})
		}
		flows := fromVFlows(t, tc.Flows)
		merged := flowstate.MergeHealth(nil, nodes)
		assert.Equal(t, tc.Msgpack, hex.EncodeToString(AppendStats(nil, flows, merged)), tc.Name)
		assert.Equal(t, tc.JSON, string(flowstate.AppendStatsJSON(nil, flows, merged)), tc.Name)
		if tc.Budget > 0 {
			ends, err := SplitStats(nil, flows, merged, tc.Budget)
			require.NoError(t, err)
			require.Len(t, ends, len(tc.Chunks), tc.Name)
			for _, c := range tc.Chunks {
				assert.LessOrEqual(t, len(c)/2, tc.Budget, tc.Name)
			}
		}
	}
}

// TestFlowstateReadsStoredValueVectors requires each stored value to be
// accepted or refused as the file says, and a valid one to be what
// AppendNodeJSON writes for what it holds.
func TestFlowstateReadsStoredValueVectors(t *testing.T) {
	var f storedFile
	readVectors(t, "stored_values.json", &f)
	require.NotEmpty(t, f.Cases)
	for _, tc := range f.Cases {
		flows, err := flowstate.AppendValueFlows(nil, []byte(tc.JSON))
		require.NoError(t, err, tc.Name)
		var h flowstate.Health
		epoch, hasEpoch, err := flowstate.DecodeNodeHealth([]byte(tc.JSON), &h)
		if !tc.Valid {
			require.ErrorIs(t, err, flowstate.ErrInvalidValue, tc.Name)
			continue
		}
		require.NoError(t, err, tc.Name)
		want := fromVHealth(t, *tc.Health)
		assert.Equal(t, normalHealth(want), normalHealth(h), tc.Name)
		assert.Equal(t, tc.NodeEpoch != nil, hasEpoch, tc.Name)
		assert.Equal(t, tc.JSON, string(flowstate.AppendNodeJSON(nil, normalFlows(flows), epoch, hasEpoch, &h)), tc.Name)
		assert.Equal(t, len(tc.Flows), len(flows), tc.Name)
		if len(flows) > 0 {
			assert.Equal(t, tc.Flows, toVFlows(normalFlows(flows)), tc.Name)
		}
	}
}

// normalHealth returns h with empty error lists nil, as JSON cannot tell
// them apart.
func normalHealth(h flowstate.Health) flowstate.Health {
	h = *h.Clone()
	for i := range h.Flows {
		if len(h.Flows[i].LastErrors) == 0 {
			h.Flows[i].LastErrors = nil
		}
	}
	return h
}

// rejectedOf is the rejected part of a vector whose report the decoder
// must reject, with the kind in.want.
func rejectedOf(t *testing.T, in reportInput, err error) *reportRejected {
	t.Helper()
	var de *DecodeError
	require.True(t, errors.As(err, &de), "%s: %v", in.name, err)
	require.Equal(t, in.want, de.Kind, "%s: %v", in.name, err)
	return &reportRejected{Code: 400, Kind: string(de.Kind), Field: de.Field, Error: de.Error()}
}

// assertRejected requires err to be the rejection a vector names.
func assertRejected(t *testing.T, want *reportRejected, err error, name string) {
	t.Helper()
	var de *DecodeError
	require.ErrorAs(t, err, &de, name)
	assert.Equal(t, want.Kind, string(de.Kind), name)
	assert.Equal(t, want.Field, de.Field, name)
	assert.Equal(t, want.Error, de.Error(), name)
	assert.Equal(t, 400, want.Code, name)
}

// acceptedReport is the report an accepted vector describes, health aside.
func acceptedReport(t *testing.T, nodeID string, epoch *string, flows []vFlow) Report {
	t.Helper()
	want := Report{Flows: fromVFlows(t, flows)}
	var err error
	want.NodeID, err = strconv.ParseUint(nodeID, 10, 64)
	require.NoError(t, err)
	if epoch != nil {
		want.HasNodeEpoch = true
		want.NodeEpoch, err = strconv.ParseUint(*epoch, 10, 64)
		require.NoError(t, err)
	}
	return want
}
