package protocol_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/flowstate-io/flowstate/protocol"
)

func TestValidEpoch(t *testing.T) {
	for e, want := range map[string]bool{
		"0123456789abcdef": true, "!": true, strings.Repeat("~", 64): true,
		"": false, strings.Repeat("a", 65): false, "a b": false, "a\x1b": false, "caf\xc3\xa9": false, "a\x7f": false,
	} {
		assert.Equal(t, want, protocol.ValidEpoch(e), "%q", e)
	}
}
