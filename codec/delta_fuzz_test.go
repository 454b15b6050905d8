package codec

import (
	"bytes"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// FuzzDecodeDelta checks that DecodeDelta never panics and that what it
// accepts is sound: flows sorted and unique, a body that msgpack/v5 reads as
// exactly one item, and a round trip through AppendDelta to the same flows.
func FuzzDecodeDelta(f *testing.F) {
	f.Add([]byte{})
	f.Add(AppendDelta(nil, 0, nil))
	f.Add(AppendDelta(nil, 1<<40, deltaFlows(fullFlows(20))))
	f.Add(newMP().Map(2).Str("flows").Map(1).Str("3").Array(3).U64(1).Nil().I8(-1).Str("base").U8(2).Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		base, flows, err := DecodeDelta(data, nil)
		if err != nil {
			return
		}
		for i := 1; i < len(flows); i++ {
			if flows[i].ID <= flows[i-1].ID {
				t.Fatalf("flows not sorted: %d after %d", flows[i].ID, flows[i-1].ID)
			}
		}
		dec := msgpack.NewDecoder(bytes.NewReader(data))
		if err := dec.Skip(); err != nil {
			t.Fatalf("accepted a body the library cannot read: %v", err)
		}
		again := AppendDelta(nil, base, flows)
		base2, flows2, err := DecodeDelta(again, nil)
		if err != nil || base2 != base || len(flows2) != len(flows) {
			t.Fatalf("round trip: %v, base %d/%d, %d/%d flows", err, base, base2, len(flows), len(flows2))
		}
		for i := range flows {
			if flows[i] != flows2[i] {
				t.Fatalf("round trip of flow %d: %+v, then %+v", flows[i].ID, flows[i], flows2[i])
			}
		}
	})
}
