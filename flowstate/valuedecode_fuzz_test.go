package flowstate_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/flowstate-io/flowstate/flowstate"
)

// FuzzAppendValueFlows checks that AppendValueFlows never panics, that its
// errors wrap ErrInvalidValue, that what it accepts is sorted by ID, each
// ID once, and re-encodes (AppendJSON) to bytes that both decoders read back
// as the same flows, and that it rejects whatever DecodeValue rejects, but
// for what serde_json accepts and encoding/json does not: a struct as a
// sequence, and skipped values nested past encoding/json's limit. Where
// both accept, they agree.
func FuzzAppendValueFlows(f *testing.F) {
	for _, s := range []string{
		`{"state_size":{"1":1024,"2":2048},"last_exec_time_map":{"1":1700000000000},"start_time_map":{}}`,
		`{"state_size":{"1":1024,"2":2048},"last_exec_time_map":{"1":1700000000000}}`,
		`{"state_size":{},"last_exec_time_map":{},"start_time_map":{},"extra":[1,{"a":null}]}`,
		`{"state_size":{"4294967295":18446744073709551615},"last_exec_time_map":{"0":-9223372036854775808},"start_time_map":{"10":9223372036854775807}}`,
		`{"state_size":{"9":1,"3":2,"9":3},"last_exec_time_map":{"3":-1,"4":2},"start_time_map":{"9":0}}`,
		`{"start_time_map":{"1":1},"x":"\u00e9\ud83d\ude00","state\u005fsize":{"2":2},"last_exec_time_map":{"1":1,"2":2}}`,
		` [ {"1":1} , {"1":2} , {"2":3} ] `,
		`{"state_size":{"01":1},"last_exec_time_map":{}}`,
		`{"state_size":{"1":-0},"last_exec_time_map":{}}`,
		`{"state_size":{"1":1.5},"last_exec_time_map":{}}`,
		`{"state_size":{"\u0031":1},"last_exec_time_map":{}}`,
		`{"state_size":{},"state_size":{},"last_exec_time_map":{}}`,
		"{\"\xff\":1,\"state_size\":{},\"last_exec_time_map\":{}}",
		`{"state_size":null,"last_exec_time_map":{}}`,
		`[]`, ``, `{`,
	} {
		f.Add([]byte(s))
	}
	prefix := []flowstate.Flow{{ID: 42, Has: flowstate.HasStartTime, StartTime: 1}}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := flowstate.AppendValueFlows(nil, data)
		old, oldErr := flowstate.DecodeValue(data)
		if err != nil {
			if !errors.Is(err, flowstate.ErrInvalidValue) {
				t.Fatalf("error does not wrap ErrInvalidValue: %v", err)
			}
			return
		}
		if oldErr != nil {
			if !bytes.HasPrefix(bytes.TrimLeft(data, " \t\r\n"), []byte("[")) &&
				!strings.Contains(oldErr.Error(), "exceeded max depth") {
				t.Fatalf("DecodeValue rejects (%v) what AppendValueFlows accepts: %q", oldErr, data)
			}
		} else {
			requireSameFlows(t, old.Flows(), got, "the decoders disagree on %q", data)
		}
		for i := 1; i < len(got); i++ {
			if got[i-1].ID >= got[i].ID {
				t.Fatalf("flows not sorted by ID, each once: %+v", got)
			}
		}
		for _, fl := range got {
			if fl.Has == 0 {
				t.Fatalf("a flow without a field: %+v", got)
			}
		}
		enc := flowstate.AppendJSON(nil, got)
		again, err := flowstate.AppendValueFlows(nil, enc)
		if err != nil {
			t.Fatalf("re-encoded value %q does not decode: %v", enc, err)
		}
		requireSameFlows(t, got, again, "round trip through %q", enc)
		v, err := flowstate.DecodeValue(enc)
		if err != nil {
			t.Fatalf("DecodeValue rejects the re-encoded value %q: %v", enc, err)
		}
		requireSameFlows(t, got, v.Flows(), "DecodeValue of %q", enc)
		after, err := flowstate.AppendValueFlows(prefix[:1:1], data)
		if err != nil || len(after) != 1+len(got) || after[0] != prefix[0] {
			t.Fatalf("appending after a flow: %+v, %v", after, err)
		}
		requireSameFlows(t, got, after[1:], "appended after a flow")
	})
}
