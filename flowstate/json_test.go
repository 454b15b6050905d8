package flowstate_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
)

func TestEncodeIsSerdeJSONForm(t *testing.T) {
	tests := []struct {
		name  string
		value flowstate.FlowStateValue
		want  string
	}{
		{
			name:  "empty maps are {}",
			value: flowstate.FlowStateValue{},
			want:  `{"state_size":{},"last_exec_time_map":{},"start_time_map":{}}`,
		},
		{
			name:  "protocol example",
			value: value(sizes{1: 1024, 2: 2048}, times{1: 1700000000000}, nil),
			want:  `{"state_size":{"1":1024,"2":2048},"last_exec_time_map":{"1":1700000000000},"start_time_map":{}}`,
		},
		{
			name:  "ids in numeric order, 2 before 10",
			value: value(sizes{10: 100, 2: 20, 1: 1}, times{10: 0, 2: 2}, times{100: 1, 9: 9}),
			want:  `{"state_size":{"1":1,"2":20,"10":100},"last_exec_time_map":{"2":2,"10":0},"start_time_map":{"9":9,"100":1}}`,
		},
		{
			name:  "negative times",
			value: value(nil, times{1: -5}, times{1: -1700000000000}),
			want:  `{"state_size":{},"last_exec_time_map":{"1":-5},"start_time_map":{"1":-1700000000000}}`,
		},
		{
			name: "extremes",
			value: value(
				sizes{0: 0, math.MaxUint32: math.MaxUint64},
				times{0: math.MinInt64, math.MaxUint32: math.MaxInt64},
				times{7: 0},
			),
			want: `{"state_size":{"0":0,"4294967295":18446744073709551615},` +
				`"last_exec_time_map":{"0":-9223372036854775808,"4294967295":9223372036854775807},` +
				`"start_time_map":{"7":0}}`,
		},
		{
			name:  "a flow in some maps only",
			value: value(sizes{1: 1}, nil, times{2: 2}),
			want:  `{"state_size":{"1":1},"last_exec_time_map":{},"start_time_map":{"2":2}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, string(encode(tt.value)))
			assert.Equal(t, "prefix:"+tt.want, string(flowstate.AppendJSON([]byte("prefix:"), tt.value.Flows())))

			decoded, err := flowstate.DecodeValue([]byte(tt.want))
			require.NoError(t, err)
			assert.True(t, tt.value.Equal(decoded), "decoded %+v", decoded)
		})
	}
}

func TestDecodeValueAccepts(t *testing.T) {
	tests := []struct {
		name string
		json string
		want flowstate.FlowStateValue
	}{
		{
			name: "legacy value without start_time_map",
			json: `{"state_size":{"1":1024},"last_exec_time_map":{"1":1700000000000}}`,
			want: value(sizes{1: 1024}, times{1: 1700000000000}, nil),
		},
		{
			name: "all fields",
			json: `{"state_size":{"1":1},"last_exec_time_map":{"2":-2},"start_time_map":{"3":3}}`,
			want: value(sizes{1: 1}, times{2: -2}, times{3: 3}),
		},
		{
			name: "fields in another order, with whitespace",
			json: " {\n\t\"start_time_map\" : { \"3\" : 3 } ,\"last_exec_time_map\":{},\"state_size\":{ } } \n",
			want: value(nil, nil, times{3: 3}),
		},
		{
			name: "unknown fields of any type are ignored",
			json: `{"node_epoch":5,"state_size":{"1":1},"extra":{"a":[1,{"b":null}],"c":"d"},` +
				`"last_exec_time_map":{},"flag":true,"none":null,"f":1.5}`,
			want: value(sizes{1: 1}, nil, nil),
		},
		{
			name: "a field named in another case is unknown",
			json: `{"state_size":{},"last_exec_time_map":{},"STATE_SIZE":{"1":1},"Start_Time_Map":{"1":"x"}}`,
			want: value(nil, nil, nil),
		},
		{
			name: "extremes",
			json: `{"state_size":{"0":0,"4294967295":18446744073709551615},` +
				`"last_exec_time_map":{"1":-9223372036854775808},"start_time_map":{"1":9223372036854775807}}`,
			want: value(sizes{0: 0, math.MaxUint32: math.MaxUint64}, times{1: math.MinInt64}, times{1: math.MaxInt64}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := flowstate.DecodeValue([]byte(tt.json))
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestDecodeValueRejects(t *testing.T) {
	const rest = `,"last_exec_time_map":{}}`
	tests := []struct {
		name string
		json string
	}{
		{"empty input", ``},
		{"not JSON", `not json`},
		{"truncated", `{"state_size":{"1":1}`},
		{"null", `null`},
		{"an array", `[]`},
		{"a number", `1`},
		{"missing state_size", `{"last_exec_time_map":{}}`},
		{"missing last_exec_time_map", `{"state_size":{}}`},
		{"state_size null", `{"state_size":null` + rest},
		{"state_size not a map", `{"state_size":[]` + rest},
		{"start_time_map null", `{"state_size":{},"last_exec_time_map":{},"start_time_map":null}`},
		{"start_time_map not a map", `{"state_size":{},"last_exec_time_map":{},"start_time_map":1}`},
		{"negative size", `{"state_size":{"1":-1}` + rest},
		{"size above uint64", `{"state_size":{"1":18446744073709551616}` + rest},
		{"time above int64", `{"state_size":{},"last_exec_time_map":{"1":9223372036854775808}}`},
		{"time below int64", `{"state_size":{},"last_exec_time_map":{"1":-9223372036854775809}}`},
		{"start time above int64", `{"state_size":{},"last_exec_time_map":{},"start_time_map":{"1":9223372036854775808}}`},
		{"flow id abc", `{"state_size":{"abc":1}` + rest},
		{"flow id -1", `{"state_size":{},"last_exec_time_map":{"-1":1}}`},
		{"flow id above uint32", `{"state_size":{},"last_exec_time_map":{},"start_time_map":{"4294967296":1}}`},
		{"empty flow id", `{"state_size":{"":1}` + rest},
		{"flow id with a leading zero", `{"state_size":{"01":1}` + rest},
		{"flow id with a sign", `{"state_size":{"+1":1}` + rest},
		{"float size", `{"state_size":{"1":1.5}` + rest},
		{"float size with zero fraction", `{"state_size":{"1":1.0}` + rest},
		{"size with exponent", `{"state_size":{"1":1e3}` + rest},
		{"float time", `{"state_size":{},"last_exec_time_map":{"1":1.5}}`},
		{"quoted size", `{"state_size":{"1":"1024"}` + rest},
		{"quoted time", `{"state_size":{},"last_exec_time_map":{"1":"-5"}}`},
		{"boolean size", `{"state_size":{"1":true}` + rest},
		{"null size", `{"state_size":{"1":null}` + rest},
		{"trailing garbage", `{"state_size":{}` + rest + `x`},
		{"trailing brace", `{"state_size":{}` + rest + `}`},
		{"trailing value", `{"state_size":{}` + rest + ` {}`},
		{"trailing number", `{"state_size":{}` + rest + ` 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := flowstate.DecodeValue([]byte(tt.json))
			assert.ErrorIs(t, err, flowstate.ErrInvalidValue, "input %s", tt.json)
		})
	}
}

func TestValueOfAndFlowsRoundTrip(t *testing.T) {
	v := value(sizes{3: 30, 1: 10}, times{2: 20, 1: -1}, times{3: 3})

	flows := v.Flows()

	assert.Equal(t, []flowstate.Flow{
		{ID: 1, Has: flowstate.HasStateSize | flowstate.HasLastExecTime, StateSize: 10, LastExecTime: -1},
		{ID: 2, Has: flowstate.HasLastExecTime, LastExecTime: 20},
		{ID: 3, Has: flowstate.HasStateSize | flowstate.HasStartTime, StateSize: 30, StartTime: 3},
	}, flows)
	assert.Equal(t, v, flowstate.ValueOf(flows))
	assert.True(t, flowstate.FlowStateValue{}.Equal(value(nil, nil, nil)), "nil and empty maps are equal")
}
