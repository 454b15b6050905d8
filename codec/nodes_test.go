package codec

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestAppendNodesDoesNotAllocateWithCapacity(t *testing.T) {
	view := testNodeViews()[6] // 100 nodes, some with an epoch
	dst := AppendNodes(nil, view)
	allocs := testing.AllocsPerRun(100, func() { dst = AppendNodes(dst[:0], view) })
	assert.Zero(t, allocs)
}
