package flowstate_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/flowstate-io/flowstate/flowstate"
)

// FuzzDecodeNodeHealth checks that DecodeNodeHealth never panics, that its
// errors wrap ErrInvalidValue and leave the health empty, and that what it
// accepts keeps the rules (Health.Check) and re-encodes (AppendNodeJSON) to
// bytes it reads back as the same health.
func FuzzDecodeNodeHealth(f *testing.F) {
	for _, s := range []string{
		`{"state_size":{"1":1024},"last_exec_time_map":{},"start_time_map":{},"processed_rows":{"1":52000},"node_epoch":1700000000000,"seq":41}`,
		`{"state_size":{},"last_exec_time_map":{},"start_time_map":{},"last_errors":{"2":[],"10":[{"time":20,"message":"b"},{"time":-1,"message":"a\"\\/\n"}]},"node_epoch":300,"seq":3,"retired_epochs":[100,200]}`,
		`{"state_size":{},"last_exec_time_map":{},"start_time_map":{},"last_errors":{"1":[{"time":1}]}}`,
		`{"state_size":{},"last_exec_time_map":{},"start_time_map":{},"processed_rows":{"1":1,"1":2}}`,
		`{"state_size":{},"last_exec_time_map":{},"start_time_map":{},"seq":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var h flowstate.Health
		epoch, hasEpoch, err := flowstate.DecodeNodeHealth(data, &h)
		if err != nil {
			if !errors.Is(err, flowstate.ErrInvalidValue) {
				t.Fatalf("error does not wrap ErrInvalidValue: %v", err)
			}
			if h.IsV3() || len(h.Flows) > 0 {
				t.Fatalf("a rejected value left health: %+v", h)
			}
			return
		}
		if reason := h.Check(); reason != "" {
			t.Fatalf("accepted health breaks the rules: %s", reason)
		}
		if !h.IsV3() {
			return
		}
		enc := flowstate.AppendNodeJSON(nil, nil, epoch, hasEpoch, &h)
		var again flowstate.Health
		epoch2, hasEpoch2, err := flowstate.DecodeNodeHealth(enc, &again)
		if err != nil || epoch2 != epoch || hasEpoch2 != hasEpoch {
			t.Fatalf("re-encoded %q: %v", enc, err)
		}
		if !reflect.DeepEqual(norm(h), norm(again)) {
			t.Fatalf("round trip through %q: %+v, %+v", enc, h, again)
		}
	})
}

// norm drops what JSON cannot tell apart: empty and nil lists.
func norm(h flowstate.Health) flowstate.Health {
	h = *h.Clone()
	for i := range h.Flows {
		if len(h.Flows[i].LastErrors) == 0 {
			h.Flows[i].LastErrors = nil
		}
	}
	if len(h.RetiredEpochs) == 0 {
		h.RetiredEpochs = nil
	}
	return h
}
