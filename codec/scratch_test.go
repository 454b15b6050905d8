package codec

import (
	"encoding/binary"
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
)

// scratchBytes is the memory that d's scratch buffers hold.
func (d *Decoder) scratchBytes() int {
	return (cap(d.ents)+cap(d.tmp))*int(unsafe.Sizeof(entry{})) +
		(cap(d.union)+cap(d.spare))*int(unsafe.Sizeof(flowstate.Flow{})) +
		cap(d.names)*int(unsafe.Sizeof(span{})) + cap(d.hashes)*8
}

// unknownFields is a report with node_id and n unknown fields with
// distinct names and nil values.
func unknownFields(n int) []byte {
	m := node(n + 1)
	for k := range n {
		m.Str(fmt.Sprintf("x%d", k)).Nil()
	}
	return m.Bytes()
}

// oneLetterFlood is the attack of issue 11 (9): an 8 MiB report of
// node_id and 2.8 million unknown fields of one-letter names ("a" to "z",
// so most are named twice) and one-byte values.
func oneLetterFlood() []byte {
	const size = 8 << 20
	n := (size - 16) / 3
	b := binary.BigEndian.AppendUint32([]byte{codeMap32}, uint32(n+1))
	b = append(b, "\xa7node_id\x01"...)
	for k := range n {
		b = append(b, 0xa1, 'a'+byte(k%26), 0)
	}
	return b
}

func TestDecodeLimitsUnknownFields(t *testing.T) {
	for _, tc := range []struct {
		name    string
		max     int
		fields  int
		limit   int // in the reason; 0: accepted
		decoder Decoder
	}{
		{"1,024 by default, accepted", 0, 1024, 0, Decoder{}},
		{"1,025 by default, rejected", 0, 1025, 1024, Decoder{}},
		{"a limit of 3, 3 accepted", 3, 3, 0, Decoder{MaxUnknownFields: 3}},
		{"a limit of 3, 4 rejected", 3, 4, 3, Decoder{MaxUnknownFields: 3}},
		{"no limit, 5,000 accepted", -1, 5000, 0, Decoder{MaxUnknownFields: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := decodeReport(t, &tc.decoder, unknownFields(tc.fields))
			if tc.limit == 0 {
				require.NoError(t, err)
				assert.Equal(t, uint64(1), r.NodeID)
				return
			}
			var de *DecodeError
			require.ErrorAs(t, err, &de)
			assert.ErrorIs(t, err, ErrInvalidReport)
			assert.Equal(t, KindTooManyUnknownFields, de.Kind)
			assert.Equal(t, fmt.Sprintf("codec: more than %d unknown fields (the limit)", tc.limit), err.Error())
		})
	}
}

// TestDecodeRejectsAFloodOfUnknownFieldsAtTheLimit decodes the 8 MiB
// report of 2.8 million unknown fields: it is rejected at field 1,025,
// without reading the rest, and leaves the scratch buffers small.
func TestDecodeRejectsAFloodOfUnknownFieldsAtTheLimit(t *testing.T) {
	body := oneLetterFlood()
	require.GreaterOrEqual(t, len(body), 8<<20-16)
	var d Decoder
	var r Report
	err := d.Decode(body, &r)
	var de *DecodeError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, KindTooManyUnknownFields, de.Kind)
	assert.LessOrEqual(t, cap(d.names), 2*DefaultMaxUnknownFields, "names of the first fields only")
	assert.Zero(t, cap(d.hashes), "the duplicate check never ran")
	assert.Less(t, d.scratchBytes(), 64<<10)
	allocs := testing.AllocsPerRun(10, func() { _ = d.Decode(body, &r) })
	assert.LessOrEqual(t, allocs, 3.0, "only the error is allocated")
}

// TestDecoderScratchShrinksAfterAnOutlier decodes one outlier (100,000
// flows, or 200,000 unknown fields with no limit) among ordinary reports:
// the buffers it grew are dropped after shrinkAfter ordinary reports, and
// ordinary reports decode without allocating again.
func TestDecoderScratchShrinksAfterAnOutlier(t *testing.T) {
	ordinary := benchReport(10)
	for _, tc := range []struct {
		name    string
		outlier []byte
	}{
		{"100,000 flows", benchReport(100_000)},
		{"200,000 unknown fields", unknownFields(200_000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decoder{MaxUnknownFields: -1}
			var r Report
			require.NoError(t, d.Decode(ordinary, &r))
			small := d.scratchBytes()

			require.NoError(t, d.Decode(tc.outlier, &r))
			grown := d.scratchBytes()
			assert.Greater(t, grown, 1<<20, "the outlier grew the buffers")
			for k := range shrinkAfter {
				assert.Equal(t, grown, d.scratchBytes(), "kept for %d ordinary reports", k)
				require.NoError(t, d.Decode(ordinary, &r))
			}
			assert.Less(t, d.scratchBytes(), 64<<10, "dropped after %d ordinary reports", shrinkAfter)

			require.NoError(t, d.Decode(ordinary, &r)) // regrows what was dropped
			assert.LessOrEqual(t, d.scratchBytes(), max(small, 64<<10))
			assert.Zero(t, testing.AllocsPerRun(100, func() { _ = d.Decode(ordinary, &r) }), "steady state")
		})
	}
}

// TestDecoderScratchIsKeptForAStreamOfMixedSizes decodes a large report
// every few small ones: the buffers stay, and nothing is allocated.
func TestDecoderScratchIsKeptForAStreamOfMixedSizes(t *testing.T) {
	large, small := benchReport(50_000), benchReport(10)
	var d Decoder
	r := Report{Flows: make([]flowstate.Flow, 0, 50_000)}
	cycle := func() {
		for k := range shrinkAfter {
			body := small
			if k == 0 {
				body = large
			}
			if err := d.Decode(body, &r); err != nil {
				t.Fatal(err)
			}
		}
	}
	cycle()
	assert.Zero(t, testing.AllocsPerRun(5, cycle))
	assert.Len(t, r.Flows, 10)
}

func BenchmarkDecodeFloodOfUnknownFields(b *testing.B) {
	body := oneLetterFlood()
	var d Decoder
	var r Report
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := d.Decode(body, &r); err == nil {
			b.Fatal("accepted")
		}
	}
}
