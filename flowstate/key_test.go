package flowstate_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/flowstate-io/flowstate/flowstate"
)

func TestNodeKey(t *testing.T) {
	assert.Equal(t, "__flow/state/node/0", flowstate.NodeKey(0))
	assert.Equal(t, "__flow/state/node/42", flowstate.NodeKey(42))
	assert.Equal(t, "__flow/state/node/18446744073709551615", flowstate.NodeKey(math.MaxUint64))
	assert.Equal(t, "__flow/state", flowstate.StateKey)
	assert.Equal(t, "__flow/state/node/", flowstate.NodeKeyPrefix)
}

func TestNodeOfKeyTakesOnlyTheCanonicalForm(t *testing.T) {
	for _, id := range []uint64{0, 7, 42, math.MaxUint64} {
		got, ok := flowstate.NodeOfKey(flowstate.NodeKey(id))
		assert.True(t, ok, "NodeKey(%d)", id)
		assert.Equal(t, id, got)
	}
	for _, key := range []string{
		"__flow/state/node/",                      // no id
		"__flow/state/node/007",                   // leading zeros
		"__flow/state/node/00",                    // a zero twice
		"__flow/state/node/+7",                    // a sign
		"__flow/state/node/-7",                    // a sign
		"__flow/state/node/1_000",                 // an underscore
		"__flow/state/node/ 7",                    // a space
		"__flow/state/node/7/x",                   // a deeper key
		"__flow/state/node/18446744073709551616",  // past uint64
		"__flow/state/node/0x10",                  // hex
		"__flow/state",                            // the aggregate key
		"__flow/state/nodes/7",                    // another prefix
		"__flow/state/node/99999999999999999999x", // trailing junk
	} {
		_, ok := flowstate.NodeOfKey(key)
		assert.False(t, ok, "%q is no node's key", key)
	}
}
