package flowstate_test

import (
	"errors"
	"testing"

	"github.com/flowstate-io/flowstate/flowstate"
)

// FuzzDecodeValue checks that DecodeValue never panics, that every error it
// returns wraps ErrInvalidValue, and that an accepted value re-encodes to the
// stored form and decodes back to itself.
func FuzzDecodeValue(f *testing.F) {
	for _, s := range []string{
		`{"state_size":{"1":1024,"2":2048},"last_exec_time_map":{"1":1700000000000},"start_time_map":{}}`,
		`{"state_size":{"1":1024,"2":2048},"last_exec_time_map":{"1":1700000000000}}`,
		`{"state_size":{},"last_exec_time_map":{},"start_time_map":{},"extra":[1,{"a":null}]}`,
		`{"state_size":{"4294967295":18446744073709551615},"last_exec_time_map":{"0":-9223372036854775808},"start_time_map":{"10":9223372036854775807}}`,
		`{"state_size":{"01":1},"last_exec_time_map":{}}`,
		`{"state_size":{"1":-1},"last_exec_time_map":{}}`,
		`{"state_size":{"1":1.5},"last_exec_time_map":{}}`,
		`{"state_size":null,"last_exec_time_map":{}}`,
		`[]`, ``, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := flowstate.DecodeValue(data)
		if err != nil {
			if !errors.Is(err, flowstate.ErrInvalidValue) {
				t.Fatalf("error does not wrap ErrInvalidValue: %v", err)
			}
			return
		}
		enc := encode(v)
		w, err := flowstate.DecodeValue(enc)
		if err != nil {
			t.Fatalf("re-encoded value %q does not decode: %v", enc, err)
		}
		if !v.Equal(w) {
			t.Fatalf("round trip changed the value: %q", enc)
		}
		if again := encode(w); string(again) != string(enc) {
			t.Fatalf("encoding is not stable: %q then %q", enc, again)
		}
	})
}
