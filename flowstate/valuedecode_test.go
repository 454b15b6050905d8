package flowstate_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
)

// decodeBoth decodes data with AppendValueFlows and with DecodeValue; the
// second as flows too.
func decodeBoth(data []byte) (got []flowstate.Flow, gotErr error, old []flowstate.Flow, oldErr error) {
	got, gotErr = flowstate.AppendValueFlows(nil, data)
	v, oldErr := flowstate.DecodeValue(data)
	if oldErr == nil {
		old = v.Flows()
	}
	return got, gotErr, old, oldErr
}

// requireSameFlows fails unless a and b hold the same flows, nil and empty
// being the same.
func requireSameFlows(tb testing.TB, want, got []flowstate.Flow, msgAndArgs ...any) {
	tb.Helper()
	if len(want) == 0 && len(got) == 0 {
		return
	}
	require.Equal(tb, want, got, msgAndArgs...)
}

func TestAppendValueFlowsDecodesAsDecodeValue(t *testing.T) {
	tests := []struct {
		name string
		json string
	}{
		{"GreptimeDB's example", `{"state_size":{"1":1024},"last_exec_time_map":{"1":1700000000000},"start_time_map":{}}`},
		{"legacy value without start_time_map", `{"state_size":{"1":1024,"2":2048},"last_exec_time_map":{"1":1700000000000}}`},
		{"flows in some maps only", `{"state_size":{"1":1,"5":5},"last_exec_time_map":{"2":-2,"5":50},"start_time_map":{"3":3,"1":10}}`},
		{"first map empty", `{"state_size":{},"last_exec_time_map":{"2":2,"1":1},"start_time_map":{"1":7}}`},
		{"ids out of order", `{"state_size":{"9":9,"3":3,"7":7},"last_exec_time_map":{"7":70,"9":90,"3":30}}`},
		{"a later map out of order", `{"state_size":{"1":1,"2":2,"3":3},"last_exec_time_map":{"3":30,"1":10,"2":20}}`},
		{"a flow id twice in one map: the last wins", `{"state_size":{"1":1,"2":2,"1":11},"last_exec_time_map":{"2":20,"2":22,"1":10}}`},
		{"a flow id twice in a later map, merged then appended", `{"state_size":{"5":1,"7":2},"last_exec_time_map":{"7":1,"5":2,"7":3}}`},
		{"fields in another order, with whitespace", " {\n\t\"start_time_map\" : { \"3\" : 3 } ,\"last_exec_time_map\":{},\"state_size\":{ \"3\" :\r1 } } \n"},
		{"unknown fields of any type are skipped", `{"node_epoch":5,"state_size":{"1":1},"extra":{"a":[1,{"b":null}],"c":"d\u00e9\ud83d\ude00\n"},` +
			`"last_exec_time_map":{},"flag":true,"none":null,"f":-1.5e-3,"big":123456789012345678901234567890,"e":[],"o":{}}`},
		{"an unknown field twice", `{"x":1,"state_size":{},"x":2,"last_exec_time_map":{}}`},
		{"a field named in another case is unknown", `{"state_size":{},"last_exec_time_map":{},"STATE_SIZE":{"1":1},"Start_Time_Map":{"1":"x"}}`},
		{"an escaped field name", `{"state\u005fsize":{"1":1},"last_exec_time_map":{},"start_time_map\/":{"1":1.5}}`},
		{"extremes", `{"state_size":{"0":0,"4294967295":18446744073709551615},` +
			`"last_exec_time_map":{"1":-9223372036854775808},"start_time_map":{"1":9223372036854775807}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err, want, oldErr := decodeBoth([]byte(tt.json))
			require.NoError(t, oldErr)
			require.NoError(t, err)
			requireSameFlows(t, want, got)
		})
	}
}

// TestAppendValueFlowsDecodesRandomValuesAsDecodeValue writes valid values
// in every way serde_json reads them (any field and key order, duplicated
// flow ids, whitespace, unknown fields) and decodes them both ways.
func TestAppendValueFlowsDecodesRandomValuesAsDecodeValue(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var dst []flowstate.Flow
	for i := range 2000 {
		data := randomValueJSON(rng)
		want, err := flowstate.DecodeValue(data)
		require.NoError(t, err, "case %d: %s", i, data)
		dst, err = flowstate.AppendValueFlows(dst[:0], data)
		require.NoError(t, err, "case %d: %s", i, data)
		requireSameFlows(t, want.Flows(), dst, "case %d: %s", i, data)
	}
}

func randomValueJSON(rng *rand.Rand) []byte {
	ws := func() string { return []string{"", "", "", " ", "\n\t", "\r "}[rng.IntN(6)] }
	ids := rng.IntN(12)
	maxID := 1 + rng.IntN(20)
	var fields []string
	for f, name := range []string{"state_size", "last_exec_time_map", "start_time_map"} {
		if f == 2 && rng.IntN(4) == 0 {
			continue // legacy
		}
		var entries []string
		sorted := rng.IntN(2) == 0
		for k := range ids {
			id := rng.IntN(maxID)
			if sorted {
				id = k
			}
			if rng.IntN(3) == 0 {
				continue
			}
			n := strconv.FormatInt(rng.Int64()>>rng.IntN(64), 10)
			if f > 0 && rng.IntN(2) == 0 {
				n = "-" + strconv.FormatUint(1+rng.Uint64()>>(1+rng.IntN(63)), 10)
			}
			entries = append(entries, ws()+`"`+strconv.Itoa(id)+`"`+ws()+":"+ws()+n+ws())
		}
		fields = append(fields, ws()+`"`+name+`"`+ws()+":"+ws()+"{"+strings.Join(entries, ",")+ws()+"}"+ws())
	}
	if rng.IntN(3) == 0 {
		fields = append(fields, `"unknown":[{"a":"b\"","c":[1,-2.5e+3,true,false,null]},{}]`)
	}
	rng.Shuffle(len(fields), func(i, j int) { fields[i], fields[j] = fields[j], fields[i] })
	return []byte(ws() + "{" + strings.Join(fields, ",") + "}" + ws())
}

// TestAppendValueFlowsAcceptsWhatSerdeJSONAccepts holds the inputs that
// serde_json 1.0.149 accepts and DecodeValue does not, or that show a rule
// of serde's.
func TestAppendValueFlowsAcceptsWhatSerdeJSONAccepts(t *testing.T) {
	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	tests := []struct {
		name string
		json string
		want []flowstate.Flow
	}{
		{"a struct as a sequence of its fields", `[{"1":1},{"1":2},{"2":3}]`, []flowstate.Flow{
			{ID: 1, Has: flowstate.HasStateSize | flowstate.HasLastExecTime, StateSize: 1, LastExecTime: 2},
			{ID: 2, Has: flowstate.HasStartTime, StartTime: 3},
		}},
		{"a sequence without start_time_map", ` [ {"1":1} , {} ] `, []flowstate.Flow{
			{ID: 1, Has: flowstate.HasStateSize, StateSize: 1},
		}},
		{"a skipped value nested past encoding/json's limit", `{"x":` + deep + `,"state_size":{},"last_exec_time_map":{}}`, nil},
		{"invalid UTF-8 in a skipped string", "{\"x\":\"\xff\xfe\",\"state_size\":{},\"last_exec_time_map\":{}}", nil},
		{"a lone surrogate in a skipped string", `{"x":{"\udc00":"\ud800"},"state_size":{},"last_exec_time_map":{}}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := flowstate.AppendValueFlows(nil, []byte(tt.json))
			require.NoError(t, err)
			requireSameFlows(t, tt.want, got)
		})
	}
}

func TestAppendValueFlowsRejects(t *testing.T) {
	const rest = `,"last_exec_time_map":{}}`
	const head = `{"state_size":{},"last_exec_time_map":{},`
	tests := []struct {
		name string
		json string
	}{
		{"empty input", ``},
		{"whitespace only", " \n"},
		{"not JSON", `not json`},
		{"truncated", `{"state_size":{"1":1}`},
		{"truncated in a key", `{"state_size":{"1`},
		{"null", `null`},
		{"a number", `1`},
		{"an empty array", `[]`},
		{"an array of one map", `[{}]`},
		{"an array of four maps", `[{},{},{},{}]`},
		{"an array with a trailing comma", `[{},{},]`},
		{"an array of null", `[null,{}]`},
		{"missing state_size", `{"last_exec_time_map":{}}`},
		{"missing last_exec_time_map", `{"state_size":{}}`},
		{"state_size twice", `{"state_size":{},"state_size":{}` + rest},
		{"last_exec_time_map twice", `{"state_size":{},"last_exec_time_map":{},"last_exec_time_map":{}}`},
		{"start_time_map twice", head + `"start_time_map":{},"start_time_map":{}}`},
		{"a field twice, once escaped", `{"state_size":{},"state\u005fsize":{}` + rest},
		{"state_size null", `{"state_size":null` + rest},
		{"state_size not a map", `{"state_size":[]` + rest},
		{"start_time_map null", head + `"start_time_map":null}`},
		{"negative size", `{"state_size":{"1":-1}` + rest},
		{"size -0", `{"state_size":{"1":-0}` + rest},
		{"time -0", `{"state_size":{},"last_exec_time_map":{"1":-0}}`},
		{"start time -0", head + `"start_time_map":{"1":-0}}`},
		{"size above uint64", `{"state_size":{"1":18446744073709551616}` + rest},
		{"size of 20 nines", `{"state_size":{"1":99999999999999999999}` + rest},
		{"size of 21 digits", `{"state_size":{"1":100000000000000000000}` + rest},
		{"flow id of 20 digits that wraps uint64 to 1", `{"state_size":{"18446744073709551617":1}` + rest},
		{"time above int64", `{"state_size":{},"last_exec_time_map":{"1":9223372036854775808}}`},
		{"time below int64", `{"state_size":{},"last_exec_time_map":{"1":-9223372036854775809}}`},
		{"float size", `{"state_size":{"1":1.5}` + rest},
		{"float size with zero fraction", `{"state_size":{"1":1.0}` + rest},
		{"size with exponent", `{"state_size":{"1":1e3}` + rest},
		{"time with exponent", `{"state_size":{},"last_exec_time_map":{"1":-1E3}}`},
		{"size with a leading zero", `{"state_size":{"1":01}` + rest},
		{"size with a plus", `{"state_size":{"1":+1}` + rest},
		{"quoted size", `{"state_size":{"1":"1024"}` + rest},
		{"null size", `{"state_size":{"1":null}` + rest},
		{"flow id abc", `{"state_size":{"abc":1}` + rest},
		{"flow id -1", `{"state_size":{},"last_exec_time_map":{"-1":1}}`},
		{"flow id -0", `{"state_size":{"-0":1}` + rest},
		{"flow id above uint32", head + `"start_time_map":{"4294967296":1}}`},
		{"empty flow id", `{"state_size":{"":1}` + rest},
		{"flow id with a leading zero", `{"state_size":{"01":1}` + rest},
		{"flow id with a sign", `{"state_size":{"+1":1}` + rest},
		{"flow id with a space before", `{"state_size":{" 1":1}` + rest},
		{"flow id with a space after", `{"state_size":{"1 ":1}` + rest},
		{"flow id float", `{"state_size":{"1.0":1}` + rest},
		{"flow id with exponent", `{"state_size":{"1e0":1}` + rest},
		{"flow id escaped", `{"state_size":{"\u0031":1}` + rest},
		{"flow id with an escape after", `{"state_size":{"1\u0030":1}` + rest},
		{"flow id unquoted", `{"state_size":{1:1}` + rest},
		{"a bad value after a flow id given twice", `{"state_size":{"1":1,"1":1.5}` + rest},
		{"invalid UTF-8 in a field name", "{\"state_size\":{},\"\xff\":1" + rest},
		{"invalid UTF-8 in a known-looking field name", "{\"state_size\xc3\":{}" + rest},
		{"a lone low surrogate in a field name", `{"\udc00":1,"state_size":{}` + rest},
		{"a lone high surrogate in a field name", `{"\ud800":1,"state_size":{}` + rest},
		{"a high surrogate then a non-surrogate in a field name", `{"\ud800\u0041":1,"state_size":{}` + rest},
		{"a control character in a field name", "{\"a\tb\":1,\"state_size\":{}" + rest},
		{"a control character in a skipped string", "{\"a\":\"\n\",\"state_size\":{}" + rest},
		{"an invalid escape in a skipped string", `{"a":"\x","state_size":{}` + rest},
		{"a short \\u escape in a skipped string", `{"a":"\u12","state_size":{}` + rest},
		{"a bad number in a skipped value", `{"a":[1.],"state_size":{}` + rest},
		{"a bad literal in a skipped value", `{"a":nul,"state_size":{}` + rest},
		{"mismatched brackets in a skipped value", `{"a":[{]},"state_size":{}` + rest},
		{"a trailing comma in a skipped value", `{"a":[1,],"state_size":{}` + rest},
		{"a trailing comma in a skipped object", `{"a":{"b":1,},"state_size":{}` + rest},
		{"an unclosed skipped value", `{"a":[[[`},
		{"a trailing comma in the struct", `{"state_size":{},"last_exec_time_map":{},}`},
		{"a trailing comma in a map", `{"state_size":{"1":1,}` + rest},
		{"a missing comma", `{"state_size":{"1":1 "2":2}` + rest},
		{"a missing colon", `{"state_size" {}` + rest},
		{"trailing garbage", `{"state_size":{}` + rest + `x`},
		{"trailing brace", `{"state_size":{}` + rest + `}`},
		{"trailing value", `{"state_size":{}` + rest + ` {}`},
		{"a NUL after the value", `{"state_size":{}` + rest + "\x00"},
		{"a byte order mark", "\ufeff" + `{"state_size":{}` + rest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := []flowstate.Flow{{ID: 99}}
			got, err := flowstate.AppendValueFlows(dst, []byte(tt.json))
			require.ErrorIs(t, err, flowstate.ErrInvalidValue, "input %s", tt.json)
			assert.Equal(t, dst, got, "dst is returned as given")
		})
	}
}

func TestAppendValueFlowsAppendsAfterDst(t *testing.T) {
	dst := []flowstate.Flow{{ID: 7, Has: flowstate.HasStateSize, StateSize: 70}}

	got, err := flowstate.AppendValueFlows(dst, []byte(`{"state_size":{"2":2},"last_exec_time_map":{"1":1}}`))

	require.NoError(t, err)
	assert.Equal(t, []flowstate.Flow{
		{ID: 7, Has: flowstate.HasStateSize, StateSize: 70},
		{ID: 1, Has: flowstate.HasLastExecTime, LastExecTime: 1},
		{ID: 2, Has: flowstate.HasStateSize, StateSize: 2},
	}, got)
}

func TestAppendValueFlowsAllocatesNothingWithCapacity(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	inputs := [][]byte{
		tenFlowValue(),
		[]byte(`{"x":[[{"a":"b"}]],"last_exec_time_map":{"3":3,"1":1},"state_size":{"2":2,"1":1,"2":20}}`),
	}
	dst := make([]flowstate.Flow, 0, 64)
	for _, data := range inputs {
		var err error
		allocs := testing.AllocsPerRun(100, func() {
			dst, err = flowstate.AppendValueFlows(dst[:0], data)
		})
		require.NoError(t, err)
		assert.Zero(t, allocs, "allocations decoding %s", data)
	}
}

// tenFlowValue is a node's report of 10 flows with all three fields, as a
// worker stores it.
func tenFlowValue() []byte {
	flows := make([]flowstate.Flow, 10)
	for i := range flows {
		flows[i] = flowstate.Flow{
			ID:           flowstate.FlowID(1000 + i),
			Has:          flowstate.HasStateSize | flowstate.HasLastExecTime | flowstate.HasStartTime,
			StateSize:    uint64(1<<20 + i*64),
			LastExecTime: 1_700_000_000_000 + int64(i)*1000,
			StartTime:    1_690_000_000_000 + int64(i),
		}
	}
	return flowstate.AppendJSON(nil, flows)
}

func BenchmarkDecodeNodeValue(b *testing.B) {
	data := tenFlowValue()
	b.Run("AppendValueFlows", func(b *testing.B) {
		dst := make([]flowstate.Flow, 0, 16)
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var err error
			if dst, err = flowstate.AppendValueFlows(dst[:0], data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DecodeValue", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			v, err := flowstate.DecodeValue(data)
			if err != nil {
				b.Fatal(err)
			}
			_ = v.Flows()
		}
	})
}

// Example of the apply path: one buffer reused for every node value.
func ExampleAppendValueFlows() {
	var flows []flowstate.Flow
	for _, stored := range []string{
		`{"state_size":{"1":1024},"last_exec_time_map":{"1":1700000000000},"start_time_map":{}}`,
		`{"state_size":{"1":1024},"last_exec_time_map":{"1":-0}}`,
	} {
		var err error
		if flows, err = flowstate.AppendValueFlows(flows[:0], []byte(stored)); err != nil {
			fmt.Println("skipped:", err)
			continue
		}
		for _, f := range flows {
			fmt.Printf("flow %d: size %d, last exec %d\n", f.ID, f.StateSize, f.LastExecTime)
		}
	}
	// Output:
	// flow 1: size 1024, last exec 1700000000000
	// skipped: flowstate: invalid flow state value: -0 is a float to serde_json at byte 53
}
