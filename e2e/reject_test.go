package e2e

import (
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rejectionLogged matches the worker's log line for a rejected report.
var rejectionLogged = regexp.MustCompile(`msg="report rejected"`)

// rawMap encodes the key/value pairs as one msgpack map, in the order
// given, each key and value with the msgpack library; a key may repeat.
func rawMap(t testing.TB, pairs ...any) []byte {
	t.Helper()
	require.Zero(t, len(pairs)%2)
	b := mpMapLen(nil, len(pairs)/2)
	for _, p := range pairs {
		b = append(b, marshal(t, p)...)
	}
	return b
}

// nest returns arrays nested depth levels deep, the innermost empty.
func nest(depth int) any {
	v := []any{}
	for range depth - 1 {
		v = []any{v}
	}
	return v
}

// TestRejectedReportChangesNothing sends reports that break a rule of
// PROTOCOL.md as requests, and requires for each a 400 with a one-line
// reason that names the field at fault, and the state and its revision
// unchanged.
func TestRejectedReportChangesNothing(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	w := startWorker(t, srv.URL, "--max-flows", "3")
	c := newClient(t, w)
	valid := rawMap(t, "node_id", uint64(7), "state_size", map[any]any{uint8(1): uint64(10)})
	r := c.reject(w.Prefix+".heartbeat.7", rawMap(t, "node_id", 7, "state_size", map[any]any{1: -1}))
	assert.Equal(t, "400", r.Code)
	m := c.get()
	require.Zero(t, m.Revision, "a rejected first report leaves revision 0")
	require.Equal(t, unhex(t, hexEmptyValue), m.Body)
	c.report(7, valid)
	c.report(8, codecReport(8, lastExec(map[uint32]int64{2: 20})))

	for _, tc := range []struct {
		outcome string
		subject string // token after <prefix>.heartbeat.; "7" if empty
		body    []byte
		field   string // the reason must name it; "" for the body as a whole
	}{
		{"node_id differing from the subject's", "7", codecReport(8, lastExec(map[uint32]int64{1: 1})), "node_id"},
		{"subject token with a leading zero", "07", valid, "subject"},
		{"subject token that is not a number", "seven", valid, "subject"},
		{"float state size", "", rawMap(t, "node_id", 7, "state_size", map[any]any{1: 1.5}), "state_size"},
		{"float32 state size", "", rawMap(t, "node_id", 7, "state_size", map[any]any{1: float32(2)}), "state_size"},
		{"negative state size", "", rawMap(t, "node_id", 7, "state_size", map[any]any{1: int8(-1)}), "state_size"},
		{"string time", "", rawMap(t, "node_id", 7, "last_exec_time_map", map[any]any{1: "100"}), "last_exec_time_map"},
		{"time outside int64", "", rawMap(t, "node_id", 7, "start_time_map", map[any]any{1: uint64(1 << 63)}), "start_time_map"},
		{"missing node_id", "", rawMap(t, "state_size", map[any]any{1: 1}), "node_id"},
		{"string node_id", "", rawMap(t, "node_id", "7"), "node_id"},
		{"negative node_id", "", rawMap(t, "node_id", int8(-7)), "node_id"},
		{"node_epoch of the wrong type", "", rawMap(t, "node_id", 7, "node_epoch", "yesterday"), "node_epoch"},
		{"field named twice", "", rawMap(t, "node_id", 7, "node_id", 7), "node_id"},
		{"flow id with a leading zero", "", rawMap(t, "node_id", 7, "last_exec_time_map", map[any]any{"07": 1}), "last_exec_time_map"},
		{"flow id with a sign", "", rawMap(t, "node_id", 7, "state_size", map[any]any{"+7": 1}), "state_size"},
		{"empty flow id", "", rawMap(t, "node_id", 7, "state_size", map[any]any{"": 1}), "state_size"},
		{"flow id outside uint32", "", rawMap(t, "node_id", 7, "state_size", map[any]any{uint64(1 << 32): 1}), "state_size"},
		{"negative flow id", "", rawMap(t, "node_id", 7, "start_time_map", map[any]any{int8(-1): 1}), "start_time_map"},
		{"float flow id", "", rawMap(t, "node_id", 7, "state_size", map[any]any{1.0: 1}), "state_size"},
		{"flow named twice as integer and string", "", rawMap(t, "node_id", 7, "state_size", map[any]any{uint8(7): 1, "7": 2}), "state_size"},
		{"map field of the wrong type", "", rawMap(t, "node_id", 7, "state_size", []any{1}), "state_size"},
		{"more flows than --max-flows", "", rawMap(t, "node_id", 7,
			"state_size", map[any]any{1: 1, 2: 2}, "last_exec_time_map", map[any]any{3: 3, 4: 4}), ""},
		{"nested deeper than 32 levels", "", rawMap(t, "node_id", 7, "future", nest(32)), ""},
		{"array body", "", marshal(t, []any{"node_id", 7}), ""},
		{"reserved byte 0xc1", "", []byte{0xc1}, ""},
		{"truncated body", "", valid[:len(valid)-1], ""},
		{"trailing bytes", "", append(append([]byte(nil), valid...), 0xc0), ""},
		{"empty body", "", nil, ""},
	} {
		t.Run(tc.outcome, func(t *testing.T) {
			subject := "7"
			if tc.subject != "" {
				subject = tc.subject
			}
			before := c.get()
			r := c.reject(w.Prefix+".heartbeat."+subject, tc.body)
			t.Logf("%s %s", r.Code, r.Reason)
			assert.Equal(t, "400", r.Code)
			assert.NotEmpty(t, r.Reason)
			assert.NotContains(t, r.Reason, "\n", "one-line reason")
			assert.Contains(t, r.Reason, tc.field, "reason names the field")
			after := c.get()
			assert.Equal(t, before.version, after.version, "version after a rejected report")
			assert.Equal(t, before.Body, after.Body, "state after a rejected report")
		})
	}
	c.requireState(flowState{StateSize: map[uint32]uint64{1: 10}, LastExecTime: map[uint32]int64{2: 20}})
	w.waitStderr(rejectionLogged)
}

// TestReportWithinTheRulesIsApplied sends reports at the edges of the rules
// (unknown fields of any type, the deepest nesting, nil maps, the most flows,
// the extreme flow ids) and requires each applied.
func TestReportWithinTheRulesIsApplied(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	w := startWorker(t, srv.URL, "--max-flows", "3")
	c := newClient(t, w)
	for _, tc := range []struct {
		outcome string
		body    []byte
		want    flowState
	}{
		{"unknown fields of any type are ignored", rawMap(t, "node_id", 7,
			"future", map[string]any{"f": 1.5, "s": "x", "n": nil, "b": true, "bin": []byte{1, 2}, "a": []any{float32(1), -1}},
			"state_size", map[any]any{1: 1},
			"when", time.Unix(1700000000, 5),
			"more", nil,
			"a_number", 3.25), flowState{StateSize: map[uint32]uint64{1: 1}}},
		{"unknown field nested 32 levels deep is ignored", rawMap(t, "node_id", 7, "future", nest(31), "start_time_map", map[any]any{"2": -2}),
			flowState{StartTime: map[uint32]int64{2: -2}}},
		{"nil maps and node_epoch are empty", rawMap(t, "node_id", 7, "node_epoch", nil,
			"state_size", nil, "last_exec_time_map", nil, "start_time_map", nil), flowState{}},
		{"node_epoch is informational", rawMap(t, "node_id", uint32(7), "node_epoch", uint64(1), "last_exec_time_map", map[any]any{int16(3): int64(-3)}),
			flowState{LastExecTime: map[uint32]int64{3: -3}}},
		{"max-flows counts distinct flow ids across the maps", rawMap(t, "node_id", 7,
			"state_size", map[any]any{1: 1, 2: 2, 3: 3}, "last_exec_time_map", map[any]any{"1": 1, "2": 2, "3": 3}, "start_time_map", map[any]any{uint64(3): 3}),
			flowState{StateSize: map[uint32]uint64{1: 1, 2: 2, 3: 3}, LastExecTime: map[uint32]int64{1: 1, 2: 2, 3: 3}, StartTime: map[uint32]int64{3: 3}}},
		{"extreme flow ids are accepted", rawMap(t, "node_id", 7,
			"state_size", map[any]any{"0": 0, "4294967295": uint64(1 << 63)}, "last_exec_time_map", map[any]any{uint64(4294967295): int8(-1)}),
			flowState{StateSize: map[uint32]uint64{0: 0, 4294967295: 1 << 63}, LastExecTime: map[uint32]int64{4294967295: -1}}},
	} {
		t.Run(tc.outcome, func(t *testing.T) {
			before := c.get()
			ack := c.report(7, tc.body)
			assert.Greater(t, ack.Revision, before.Revision)
			c.requireState(tc.want)
		})
	}
}
