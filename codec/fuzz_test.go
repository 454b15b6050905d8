package codec

import (
	"bytes"
	"reflect"
	"slices"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/flowstate-io/flowstate/flowstate"
)

// FuzzDecodeReport checks that Decode never panics and that what it accepts
// is sound: flows sorted and unique, each with a field, the same result from
// a fresh and a used Decoder, the limit applied exactly, a round trip
// through AppendReport and AppendAggregate, and a body that msgpack/v5 reads
// as exactly one item.
func FuzzDecodeReport(f *testing.F) {
	f.Add([]byte{})
	f.Add(node(1).Bytes())
	f.Add(benchReport(5))
	f.Add(benchReportUnsorted(f, 5))
	f.Add(nested(MaxDepth, true))
	f.Add(nested(MaxDepth+1, false))
	f.Add(node(3).Str("state_size").Map(2).Str("7").Uint(1).U8(7).Uint(2).Str("x").Ext(1, []byte{1}).Bytes())
	f.Add(node(2).Str("last_exec_time_map").Map(2).Str("07").I64(-1).Uint(1).U64(1 << 63).Bytes())
	f.Add(node(2).Str("state_size").Raw(codeMap32, 0x80, 0, 0, 0).Bytes())
	f.Add(AppendReport(nil, v3Report()))
	f.Add(node(4).Str("processed_rows").Map(1).Str("9").Uint(1).Str("seq").Uint(3).
		Str("last_errors").Map(2).Uint(9).Array(1).Map(3).Str("x").Nil().Str("time").I64(-1).Str("message").Str("é").Uint(1).Array(0).Bytes())

	const limit = 4
	used := benchReport(100)
	f.Fuzz(func(t *testing.T, data []byte) {
		var fresh, reused, limited Decoder
		limited.MaxFlows = limit
		var r, r2, r3 Report
		err := fresh.Decode(data, &r)

		if err := reused.Decode(used, &r2); err != nil {
			t.Fatal(err)
		}
		err2 := reused.Decode(data, &r2)
		if (err == nil) != (err2 == nil) || err == nil && !sameReport(r, r2) {
			t.Fatalf("a used decoder disagrees: %v, %v", err, err2)
		}

		err3 := limited.Decode(data, &r3)
		switch {
		case err != nil && err3 == nil:
			t.Fatalf("the limit turned a rejected report into an accepted one: %v", err)
		case err == nil && flowstate.DistinctFlows(r.Flows, r.Health.Flows) <= limit && err3 != nil:
			t.Fatalf("%d flows rejected with a limit of %d: %v", flowstate.DistinctFlows(r.Flows, r.Health.Flows), limit, err3)
		case err == nil && flowstate.DistinctFlows(r.Flows, r.Health.Flows) > limit && err3 == nil:
			t.Fatalf("%d flows accepted with a limit of %d", flowstate.DistinctFlows(r.Flows, r.Health.Flows), limit)
		}

		if err != nil {
			return
		}
		for i, fl := range r.Flows {
			if fl.Has == 0 || fl.Has&^(hasAll) != 0 {
				t.Fatalf("flow %d has fields %b", fl.ID, fl.Has)
			}
			if i > 0 && r.Flows[i-1].ID >= fl.ID {
				t.Fatalf("flows not sorted and unique: %d then %d", r.Flows[i-1].ID, fl.ID)
			}
		}
		if reason := r.Health.Check(); reason != "" {
			t.Fatalf("accepted health breaks the rules: %s", reason)
		}
		var again Report
		if err := fresh.Decode(AppendReport(nil, &r), &again); err != nil {
			t.Fatalf("re-encoded report rejected: %v", err)
		}
		if !sameReport(r, again) {
			t.Fatalf("round trip changed the report: %+v, %+v", r, again)
		}
		v, err := DecodeAggregate(AppendAggregate(nil, r.Flows))
		if err != nil || !v.Equal(r.Value()) {
			t.Fatalf("aggregate round trip: %v", err)
		}
		rd := bytes.NewReader(data)
		if err := msgpack.NewDecoder(rd).Skip(); err != nil || rd.Len() != 0 {
			t.Fatalf("msgpack/v5 does not read the body as one item: %v, %d bytes left", err, rd.Len())
		}
	})
}

func sameReport(a, b Report) bool {
	return a.NodeID == b.NodeID && a.NodeEpoch == b.NodeEpoch && a.HasNodeEpoch == b.HasNodeEpoch &&
		slices.Equal(a.Flows, b.Flows) && reflect.DeepEqual(normalHealth(a.Health), normalHealth(b.Health))
}
