package protocol_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/flowstate-io/flowstate/protocol"
)

func TestSubjectsOfPrefix(t *testing.T) {
	s := protocol.SubjectsOf("")
	assert.Equal(t, "flow.heartbeat.*", s.Heartbeats)
	assert.Equal(t, "flow.heartbeat.42", s.Heartbeat(42))
	assert.Equal(t, "flow.state", s.State)
	assert.Equal(t, "flow.state.delta", s.Delta)
	assert.Equal(t, "flow.state.get", s.Get)
	assert.Equal(t, "a.b.state.nodes", protocol.SubjectsOf("a.b").Nodes)
}

func TestParseNodeTokenAcceptsOnlyCanonicalDecimal(t *testing.T) {
	for tok, want := range map[string]bool{
		"0": true, "7": true, "18446744073709551615": true,
		"": false, "07": false, "+7": false, "-1": false, "18446744073709551616": false,
		"1a": false, "000000000000000000000000000001": false,
	} {
		_, ok := protocol.ParseNodeToken(tok)
		assert.Equal(t, want, ok, "token %q", tok)
	}
}

func TestValidatePrefixAndQueue(t *testing.T) {
	assert.NoError(t, protocol.ValidatePrefix(""))
	assert.NoError(t, protocol.ValidatePrefix("a.b"))
	for _, bad := range []string{"a b", "a.*", ">", ".a", "a.", "a..b"} {
		assert.Error(t, protocol.ValidatePrefix(bad), bad)
	}
	assert.NoError(t, protocol.ValidateQueue("q"))
	assert.Error(t, protocol.ValidateQueue("q.x"))
	assert.Error(t, protocol.ValidateQueue("q*"))
}

func TestOverlaps(t *testing.T) {
	assert.True(t, protocol.Overlaps("flow.heartbeat.*", "flow.heartbeat.5"))
	assert.False(t, protocol.Overlaps("flow.heartbeat.*", "flow.heartbeat"))
	assert.False(t, protocol.Overlaps("flow.heartbeat.*", "flow.heartbeat.5.x"))
	assert.True(t, protocol.Overlaps("flow.>", "flow.state.get"))
	assert.True(t, protocol.Overlaps("flow.state", "flow.state"))
	assert.False(t, protocol.Overlaps("flow.state", "flow.states"))
}

func TestUsedNamesTheSubjectsTheWorkerConsumesPublishesOrServes(t *testing.T) {
	for _, tc := range []struct {
		prefix, subject, used string
	}{
		{"", "flow.heartbeat.5", "flow.heartbeat.*"},
		{"", "flow.heartbeat.dead", "flow.heartbeat.*"},
		{"", "flow.state", "flow.state"},
		{"", "flow.state.delta", "flow.state.delta"},
		{"", "flow.state.get", "flow.state.get"},
		{"", "flow.state.nodes", "flow.state.nodes"},
		{"", "$SRV.PING", "$SRV.>"},
		{"", "$SRV.INFO.flowstate.abc", "$SRV.>"},
		{"staging.flow", "staging.flow.heartbeat.1", "staging.flow.heartbeat.*"},
		{"staging.flow", "flow.heartbeat.1", ""},
		{"", "flow.heartbeat", ""},
		{"", "flow.heartbeat.5.dead", ""},
		{"", "flow.rejected", ""},
		{"", "$SRV", ""},
	} {
		assert.Equal(t, tc.used, protocol.SubjectsOf(tc.prefix).Used(tc.subject), "%s under prefix %q", tc.subject, tc.prefix)
	}
}
