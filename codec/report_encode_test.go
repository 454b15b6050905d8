package codec

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/flowstate"
)

func TestAppendReportWritesTheDocumentedBytes(t *testing.T) {
	r := Report{NodeID: 3, NodeEpoch: 200, HasNodeEpoch: true, Flows: []flowstate.Flow{sizeFlow(7, 1024)}}
	want := mustHex("85 a7 6e6f64655f6964 03 aa 6e6f64655f65706f6368 ccc8 " +
		hexStateSize + " 81 07 cd0400 " + hexLastExec + " 80 " + hexStartTime + " 80")
	assert.Equal(t, want, AppendReport(nil, &r))

	r.HasNodeEpoch = false
	want = mustHex("84 a7 6e6f64655f6964 03 " + hexStateSize + " 81 07 cd0400 " + hexLastExec + " 80 " + hexStartTime + " 80")
	assert.Equal(t, want, AppendReport(nil, &r))
}

func TestAppendReportRoundTrips(t *testing.T) {
	var d Decoder
	for i, flows := range testStates() {
		for _, want := range []Report{
			{NodeID: uint64(i), Flows: flows},
			{NodeID: 1 << 63, NodeEpoch: 1_700_000_000_000, HasNodeEpoch: true, Flows: flows},
		} {
			got, err := decodeReport(t, &d, AppendReport(nil, &want))
			require.NoError(t, err)
			assert.Equal(t, normal(want), normal(got), "state %d", i)
		}
	}
}

func TestAppendReportDoesNotAllocate(t *testing.T) {
	r := Report{NodeID: 1, Flows: fullFlows(1000)}
	dst := AppendReport(nil, &r)
	allocs := testing.AllocsPerRun(100, func() { dst = AppendReport(dst[:0], &r) })
	assert.Zero(t, allocs)
}
