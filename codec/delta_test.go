package codec

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/flowstate-io/flowstate/flowstate"
)

// deltaFlows returns the flows of a test state with every third one marked
// as left (Has == 0), as a delta carries them.
func deltaFlows(flows []flowstate.Flow) []flowstate.Flow {
	out := append([]flowstate.Flow(nil), flows...)
	for i := range out {
		if i%3 == 2 {
			out[i] = flowstate.Flow{ID: out[i].ID}
		}
	}
	return out
}

func TestAppendDeltaWritesTheDocumentedBytes(t *testing.T) {
	flows := []flowstate.Flow{
		{ID: 1, Has: flowstate.HasStateSize | flowstate.HasStartTime, StateSize: 1024, StartTime: -1},
		{ID: 7},
	}
	got := AppendDelta(nil, 5, flows)
	// {"base": 5, "flows": {1: [1024, nil, -1], 7: [nil, nil, nil]}}
	want := mustHex("82 a4626173650 5 a5666c6f7773 82 01 93 cd0400 c0 ff 07 93 c0 c0 c0")
	assert.Equal(t, want, got)
	assert.Equal(t, len(got), DeltaLen(5, flows))
}

func TestDeltaRoundTripsAndDeltaLenIsExact(t *testing.T) {
	var buf []byte
	var dec []flowstate.Flow
	for _, state := range testStates() {
		flows := deltaFlows(state)
		for _, base := range []uint64{0, 1, 200, 1 << 40} {
			buf = AppendDelta(buf[:0], base, flows)
			require.Equal(t, len(buf), DeltaLen(base, flows))
			b, got, err := DecodeDelta(buf, dec)
			require.NoError(t, err)
			assert.Equal(t, base, b)
			if len(flows) == 0 {
				assert.Empty(t, got)
			} else {
				assert.Equal(t, flows, got)
			}
			dec = got
		}
	}
}

// libraryDelta is a delta as a Go program would declare it for msgpack/v5.
type libraryDelta struct {
	Base  uint64           `msgpack:"base"`
	Flows map[uint32][]any `msgpack:"flows"`
}

func TestLibraryReadsWhatAppendDeltaWrites(t *testing.T) {
	for _, state := range testStates() {
		flows := deltaFlows(state)
		var d libraryDelta
		require.NoError(t, msgpack.Unmarshal(AppendDelta(nil, 9, flows), &d))
		assert.Equal(t, uint64(9), d.Base)
		require.Len(t, d.Flows, len(flows))
		for _, f := range flows {
			arr := d.Flows[uint32(f.ID)]
			require.Len(t, arr, 3)
			for k, bit := range []flowstate.Fields{flowstate.HasStateSize, flowstate.HasLastExecTime, flowstate.HasStartTime} {
				if f.Has&bit == 0 {
					assert.Nil(t, arr[k])
					continue
				}
				want := []any{f.StateSize, f.LastExecTime, f.StartTime}[k]
				assert.EqualValues(t, want, toNumber(arr[k]), "flow %d field %d", f.ID, k)
			}
		}
	}
}

// toNumber widens what the library decodes an integer into.
func toNumber(v any) any {
	switch n := v.(type) {
	case int8:
		return int64(n)
	case int16:
		return int64(n)
	case int32:
		return int64(n)
	case uint8:
		return uint64(n)
	case uint16:
		return uint64(n)
	case uint32:
		return uint64(n)
	}
	return v
}

func TestDecodeDeltaReadsOtherEncoders(t *testing.T) {
	// String ids, the keys in the other order, an unknown key, wide ints.
	body := newMP().Map(3).
		Str("flows").Map(2).
		Str("3").Array(3).U64(10).Nil().I64(-5).
		Str("12").Array(3).Nil().Nil().Nil().
		Str("extra").Array(1).Bool(true).
		Str("base").U32(4).Bytes()
	base, flows, err := DecodeDelta(body, nil)
	require.NoError(t, err)
	assert.Equal(t, uint64(4), base)
	assert.Equal(t, []flowstate.Flow{
		{ID: 3, Has: flowstate.HasStateSize | flowstate.HasStartTime, StateSize: 10, StartTime: -5},
		{ID: 12},
	}, flows)
}

func TestDecodeDeltaRejects(t *testing.T) {
	for name, body := range map[string][]byte{
		"empty":          nil,
		"not a map":      newMP().Array(0).Bytes(),
		"no base":        newMP().Map(1).Str("flows").Map(0).Bytes(),
		"negative base":  newMP().Map(1).Str("base").Int(-1).Bytes(),
		"base twice":     newMP().Map(2).Str("base").Uint(1).Str("base").Uint(1).Bytes(),
		"trailing bytes": append(AppendDelta(nil, 1, nil), 0),
		"truncated":      AppendDelta(nil, 1, fullFlows(3))[:20],
		"descending ids": newMP().Map(2).Str("base").Uint(1).Str("flows").Map(2).
			Uint(5).Array(3).Nil().Nil().Nil().Uint(4).Array(3).Nil().Nil().Nil().Bytes(),
		"id twice": newMP().Map(2).Str("base").Uint(1).Str("flows").Map(2).
			Uint(5).Array(3).Nil().Nil().Nil().Str("5").Array(3).Nil().Nil().Nil().Bytes(),
		"array of 2":         newMP().Map(2).Str("base").Uint(1).Str("flows").Map(1).Uint(5).Array(2).Nil().Nil().Bytes(),
		"negative size":      newMP().Map(2).Str("base").Uint(1).Str("flows").Map(1).Uint(5).Array(3).Int(-1).Nil().Nil().Bytes(),
		"time past int64":    newMP().Map(2).Str("base").Uint(1).Str("flows").Map(1).Uint(5).Array(3).Nil().U64(1 << 63).Nil().Bytes(),
		"float":              newMP().Map(2).Str("base").Uint(1).Str("flows").Map(1).Uint(5).Array(3).F64(1).Nil().Nil().Bytes(),
		"bad id":             newMP().Map(2).Str("base").Uint(1).Str("flows").Map(1).Str("05").Array(3).Nil().Nil().Nil().Bytes(),
		"huge flows map":     newMP().Map(2).Str("base").Uint(1).Str("flows").Raw(0xdf, 0x7f, 0xff, 0xff, 0xff).Bytes(),
		"flows not a map":    newMP().Map(2).Str("base").Uint(1).Str("flows").Array(0).Bytes(),
		"key not a string":   newMP().Map(1).Uint(1).Uint(1).Bytes(),
		"reserved byte 0xc1": newMP().Map(1).Str("base").Raw(0xc1).Bytes(),
	} {
		_, _, err := DecodeDelta(body, nil)
		assert.ErrorIs(t, err, ErrInvalidDelta, name)
	}
}

func TestDecodeDeltaNeverPanics(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	body := AppendDelta(nil, 77, deltaFlows(randomFlows(rng, 200, 1<<20)))
	for range 2000 {
		b := append([]byte(nil), body...)
		for range 1 + rng.IntN(4) {
			b[rng.IntN(len(b))] = byte(rng.Uint32())
		}
		b = b[:rng.IntN(len(b)+1)]
		_, _, _ = DecodeDelta(b, nil)
	}
}
