package codec

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
)

// vectorsMaxFlows is the --max-flows the report vectors are judged with.
const vectorsMaxFlows = 4

// reportInput is a report vector before it is judged: its bytes, the node
// whose subject it goes to, and the kind of error it must give ("" when it
// must be accepted).
type reportInput struct {
	name      string
	node      uint64
	body      []byte
	canonical bool
	want      Kind
}

func reportInputs() []reportInput {
	full := []flowstate.Flow{
		{ID: 1, Has: hasAll, StateSize: 1024, LastExecTime: 1_700_000_000_000, StartTime: 1_690_000_000_000},
		{ID: 2, Has: hasSize | hasLast, StateSize: 2048, LastExecTime: 1_700_000_000_500},
		{ID: 300, Has: hasStart, StartTime: 5},
	}
	extreme := []flowstate.Flow{
		{ID: 0, Has: hasAll, StateSize: 0, LastExecTime: -1, StartTime: -33},
		{ID: 127, Has: hasAll, StateSize: 128, LastExecTime: -129, StartTime: 255},
		{ID: 65535, Has: hasAll, StateSize: 65536, LastExecTime: -32769, StartTime: math.MinInt64},
		{ID: math.MaxUint32, Has: hasAll, StateSize: math.MaxUint64, LastExecTime: math.MaxInt64, StartTime: 1 << 32},
	}
	canon := func(name string, nodeID uint64, epoch uint64, flows []flowstate.Flow) reportInput {
		r := Report{NodeID: nodeID, NodeEpoch: epoch, HasNodeEpoch: epoch != 0, Flows: flows}
		return reportInput{name: name, node: nodeID, body: AppendReport(nil, &r), canonical: true}
	}
	ok := func(name string, nodeID uint64, body []byte) reportInput {
		return reportInput{name: name, node: nodeID, body: body}
	}
	bad := func(name string, kind Kind, body []byte) reportInput {
		return reportInput{name: name, node: 1, body: body, want: kind}
	}
	deep := newMP().Map(2).Str("node_id").Uint(1).Str("x")
	for range 30 {
		deep.Array(1)
	}
	tooDeep := newMP().Map(2).Str("node_id").Uint(1).Str("x")
	for range 31 {
		tooDeep.Array(1)
	}
	return []reportInput{
		canon("three flows with node_epoch", 1, 1_700_000_000_000, full),
		canon("empty report: removes the node's flows", 2, 0, nil),
		canon("extreme values and every integer width", 3, math.MaxUint64, extreme),
		canon("node id past uint32", 1<<40, 0, full[:1]),
		ok("string flow ids in any order, as Go maps write them", 1, node(4).Str("state_size").Map(2).
			Str("10").Uint(7).Str("2").Uint(9).
			Str("last_exec_time_map").Map(1).Str("10").Int(1_700_000_000_000).
			Str("start_time_map").Map(0).Bytes()),
		ok("integers wider than their shortest form", 5, newMP().Map(3).Str("node_id").U64(5).
			Str("state_size").Map(2).U64(1).U64(1).U16(2).U32(2).
			Str("last_exec_time_map").Map(1).U8(1).I64(3).Bytes()),
		ok("nil node_epoch and nil maps are empty", 6, newMP().Map(5).Str("node_id").Uint(6).Str("node_epoch").Nil().
			Str("state_size").Nil().Str("last_exec_time_map").Nil().Str("start_time_map").Nil().Bytes()),
		ok("unknown fields of every type are skipped", 7, newMP().Map(8).Str("future").Map(1).Str("a").Array(2).F64(1.5).Nil().
			Str("bin").Bin([]byte{1, 2}).Str("ext").Ext(3, []byte{9}).Str("flag").Bool(true).
			Str("state_size").Map(1).Uint(8).Uint(800).Str("node_id").Uint(7).Str("f32").F32(2).
			Str("s").Str("text").Bytes()),
		ok("fields in another order", 8, newMP().Map(3).Str("start_time_map").Map(1).Uint(1).Int(-5).
			Str("node_id").Uint(8).Str("node_epoch").Uint(1).Bytes()),
		ok("nesting 32 levels deep in an unknown field", 1, deep.Array(0).Bytes()),
		bad("empty body", KindEmpty, nil),
		bad("the reserved byte 0xc1", KindNotMsgpack, []byte{0xc1}),
		bad("truncated", KindNotMsgpack, node(2).Str("state_size").Map(1).Uint(1).Bytes()),
		bad("trailing bytes", KindTrailingBytes, node(1).Raw(0x00).Bytes()),
		bad("top level is an array", KindBadType, newMP().Array(1).Uint(1).Bytes()),
		bad("no node_id", KindMissingNodeID, newMP().Map(1).Str("state_size").Map(0).Bytes()),
		bad("node_id is a string", KindBadType, newMP().Map(1).Str("node_id").Str("1").Bytes()),
		bad("negative node_id", KindOutOfRange, newMP().Map(1).Str("node_id").Int(-1).Bytes()),
		bad("field name is not a string", KindBadType, node(2).Uint(1).Uint(2).Bytes()),
		bad("node_id named twice", KindDuplicateField, node(2).Str("node_id").Uint(1).Bytes()),
		bad("unknown field named twice", KindDuplicateField, node(3).Str("x").Uint(1).Str("x").Uint(2).Bytes()),
		bad("flow id with a leading zero", KindBadFlowID, node(2).Str("state_size").Map(1).Str("07").Uint(1).Bytes()),
		bad("flow id with a sign", KindBadFlowID, node(2).Str("state_size").Map(1).Str("+7").Uint(1).Bytes()),
		bad("empty flow id", KindBadFlowID, node(2).Str("last_exec_time_map").Map(1).Str("").Int(1).Bytes()),
		bad("flow id past uint32", KindBadFlowID, node(2).Str("state_size").Map(1).Uint(1<<32).Uint(1).Bytes()),
		bad("flow id is a float", KindBadFlowID, node(2).Str("state_size").Map(1).F64(7).Uint(1).Bytes()),
		bad("flow named as 7 and \"7\"", KindDuplicateFlow, node(2).Str("state_size").Map(2).Uint(7).Uint(1).Str("7").Uint(2).Bytes()),
		bad("negative state size", KindOutOfRange, node(2).Str("state_size").Map(1).Uint(1).Int(-1).Bytes()),
		bad("state size is a float", KindBadType, node(2).Str("state_size").Map(1).Uint(1).F64(1).Bytes()),
		bad("time is a string", KindBadType, node(2).Str("start_time_map").Map(1).Uint(1).Str("5").Bytes()),
		bad("time past int64", KindOutOfRange, node(2).Str("last_exec_time_map").Map(1).Uint(1).U64(1<<63).Bytes()),
		bad("state_size is an array", KindBadType, node(2).Str("state_size").Array(0).Bytes()),
		bad("nesting 33 levels deep", KindTooDeep, tooDeep.Array(0).Bytes()),
		bad("more flows than --max-flows 4", KindTooManyFlows, node(3).Str("state_size").Map(3).Uint(1).Uint(1).Uint(2).Uint(1).Uint(3).Uint(1).
			Str("start_time_map").Map(2).Uint(4).Int(1).Uint(5).Int(1).Bytes()),
		bad("array header claims more entries than the body holds", KindNotMsgpack, node(2).Str("x").Raw(0xdd, 0xff, 0xff, 0xff, 0xff).Bytes()),
	}
}

func aggregateInputs() []struct {
	name  string
	flows []flowstate.Flow
} {
	rng := rand.New(rand.NewPCG(23, 1))
	return []struct {
		name  string
		flows []flowstate.Flow
	}{
		{"empty", nil},
		{"GreptimeDB's example", []flowstate.Flow{
			{ID: 1, Has: hasSize | hasLast, StateSize: 1024, LastExecTime: 1_700_000_000_000},
			sizeFlow(2, 2048)}},
		{"ids ascend numerically: 2 before 10", []flowstate.Flow{lastFlow(2, 1), sizeFlow(10, 1), startFlow(100, 1)}},
		{"extreme values", []flowstate.Flow{
			{ID: 0, Has: hasAll, LastExecTime: math.MinInt64, StartTime: -1},
			{ID: math.MaxUint32, Has: hasAll, StateSize: math.MaxUint64, LastExecTime: math.MaxInt64, StartTime: -32}}},
		{"16 flows: a map16 header", fullFlows(16)},
		{"random flows", seededFlows(rng, 40)},
	}
}

func deltaInputs() []struct {
	name  string
	base  uint64
	flows []flowstate.Flow
} {
	return []struct {
		name  string
		base  uint64
		flows []flowstate.Flow
	}{
		{"first delta of an epoch", 0, fullFlows(2)},
		{"a flow leaves: [nil, nil, nil]", 41, []flowstate.Flow{{ID: 3}, lastFlow(9, 1_700_000_000_000)}},
		{"no flows: the body of a resync delta", 1 << 40, nil},
		{"extreme values", math.MaxUint64, []flowstate.Flow{
			{ID: math.MaxUint32, Has: hasAll, StateSize: math.MaxUint64, LastExecTime: math.MinInt64, StartTime: math.MaxInt64}}},
		{"16 flows: a map16 header", 7, fullFlows(16)},
	}
}

func chunkInputs() []struct {
	name   string
	budget int
	flows  []flowstate.Flow
} {
	rng := rand.New(rand.NewPCG(23, 2))
	return []struct {
		name   string
		budget int
		flows  []flowstate.Flow
	}{
		{"empty aggregate: one empty chunk", 100, nil},
		{"fits in one chunk", 1 << 20, fullFlows(5)},
		{"40 flows in chunks of at most 200 bytes", 200, fullFlows(40)},
		{"random flows in chunks of at most 120 bytes", 120, seededFlows(rng, 30)},
	}
}

// generateVectors returns the vector files, by name, as the codec writes
// them for the inputs above.
func generateVectors(t *testing.T) map[string][]byte {
	t.Helper()
	d := Decoder{MaxFlows: vectorsMaxFlows}
	reports := reportFile{
		Comment:  "Heartbeat reports (PROTOCOL.md), msgpack in hex, judged by a worker run with --max-flows max_flows: accepted (the decoded report) or rejected (the reply's Nats-Service-Error-Code and Nats-Service-Error; kind and field are the worker's counted reason and the place). Send each on <prefix>.heartbeat.<node>. A canonical report is the bytes an encoder writes for it. Generated by `go test ./codec/ -run TestVectorsAreTheCodecs -update`.",
		MaxFlows: vectorsMaxFlows,
	}
	for _, in := range reportInputs() {
		c := reportCase{Name: in.name, Node: strconv.FormatUint(in.node, 10), Msgpack: hex.EncodeToString(in.body), Canonical: in.canonical}
		r, err := decodeReport(t, &d, in.body)
		if in.want == "" {
			require.NoError(t, err, in.name)
			c.Accepted = &reportAccepted{NodeID: strconv.FormatUint(r.NodeID, 10), Flows: toVFlows(r.Flows)}
			if r.HasNodeEpoch {
				c.Accepted.NodeEpoch = u64s(r.NodeEpoch)
			}
			require.Equal(t, c.Node, c.Accepted.NodeID, in.name)
		} else {
			c.Rejected = rejectedOf(t, in, err)
		}
		reports.Cases = append(reports.Cases, c)
	}

	aggregates := aggregateFile{Comment: "Aggregates (PROTOCOL.md, Aggregate): the flows, their canonical msgpack (hex) and the bytes serde_json writes for GreptimeDB's FlowStateValue."}
	for _, in := range aggregateInputs() {
		aggregates.Cases = append(aggregates.Cases, aggregateCase{Name: in.name, Flows: toVFlows(in.flows),
			Msgpack: hex.EncodeToString(AppendAggregate(nil, in.flows)), JSON: string(flowstate.AppendJSON(nil, in.flows))})
	}

	deltas := deltaFile{Comment: "Delta bodies of <prefix>.state.delta (PROTOCOL.md v2): base, the flows (one without fields left the aggregate: [nil, nil, nil]) and the msgpack (hex)."}
	for _, in := range deltaInputs() {
		deltas.Cases = append(deltas.Cases, deltaCase{Name: in.name, Base: strconv.FormatUint(in.base, 10), Flows: toVFlows(in.flows),
			Msgpack: hex.EncodeToString(AppendDelta(nil, in.base, in.flows))})
	}

	chunks := chunkFile{Comment: "Chunked snapshots (PROTOCOL.md v2): an aggregate cut into chunks of at most budget bytes each, as the worker cuts it; each chunk is an aggregate in canonical msgpack (hex), ascending disjoint id ranges that together are the aggregate."}
	for _, in := range chunkInputs() {
		ends, err := SplitAggregate(nil, in.flows, in.budget)
		require.NoError(t, err, in.name)
		c := chunkCase{Name: in.name, Budget: in.budget, Flows: toVFlows(in.flows), Chunks: []string{}}
		start := 0
		for _, end := range ends {
			c.Chunks = append(c.Chunks, hex.EncodeToString(AppendAggregate(nil, in.flows[start:end])))
			start = end
		}
		chunks.Cases = append(chunks.Cases, c)
	}

	files := map[string]any{"reports.json": reports, "aggregates.json": aggregates, "deltas.json": deltas, "chunks.json": chunks}
	for name, v := range generateV3Vectors(t) {
		files[name] = v
	}
	out := map[string][]byte{}
	for name, v := range files {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		require.NoError(t, enc.Encode(v))
		out[name] = buf.Bytes()
	}
	return out
}

// seededFlows returns n flows with ascending random ids, each with a random
// non-empty subset of fields and values of every width: the same flows for
// the same rng state (randomFlows draws in map order).
func seededFlows(rng *rand.Rand, n int) []flowstate.Flow {
	flows := make([]flowstate.Flow, 0, n)
	id := uint32(0)
	for range n {
		id += 1 + rng.Uint32N(1<<26)
		f := flowstate.Flow{ID: flowstate.FlowID(id), Has: flowstate.Fields(1 + rng.IntN(7))}
		if f.Has&hasSize != 0 {
			f.StateSize = rng.Uint64() >> rng.IntN(65)
		}
		if f.Has&hasLast != 0 {
			f.LastExecTime = int64(rng.Uint64()) >> rng.IntN(65)
		}
		if f.Has&hasStart != 0 {
			f.StartTime = int64(rng.Uint64()) >> rng.IntN(65)
		}
		flows = append(flows, f)
	}
	return flows
}
