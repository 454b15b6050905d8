package jetstream

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A replica the stream's leader has not heard from for ReplicaSilence is
// reported once, with its server, until it is current again, which is
// reported once too; StuckServers says so meanwhile.
func TestWatchReplicasReportsAStuckServerOncePerCondition(t *testing.T) {
	var logs bytes.Buffer
	s := &Store{cfg: Config{Bucket: "b", ReplicaSilence: 30 * time.Second}.withDefaults(),
		log: slog.New(slog.NewTextHandler(&logs, nil))}
	look := func(s1 Replica) map[string]bool {
		s1.Server = "s1"
		s.noteReplicas([]Replica{{Server: "s2", Leader: true, Current: true}, {Server: "s0", Current: true, Silent: time.Second}, s1})
		return s.StuckServers()
	}
	lines := func() []string { return strings.Split(strings.TrimSpace(logs.String()), "\n") }

	healthy := map[string]bool{"s0": false, "s1": false, "s2": false}
	assert.Equal(t, healthy, look(Replica{Current: true}))
	assert.Equal(t, healthy, look(Replica{Silent: 29 * time.Second, Lag: 40}), "not yet")
	assert.Empty(t, logs.String())

	stuck := map[string]bool{"s0": false, "s1": true, "s2": false}
	assert.Equal(t, stuck, look(Replica{Silent: 30 * time.Second, Lag: 50}))
	assert.Equal(t, stuck, look(Replica{Silent: 35 * time.Second, Lag: 60}))
	assert.Len(t, lines(), 1, "logged once")
	assert.Contains(t, lines()[0], "level=ERROR")
	assert.Contains(t, lines()[0], "needs a restart")
	assert.Contains(t, lines()[0], "server=s1")
	assert.Contains(t, lines()[0], "leader=s2")

	assert.Equal(t, stuck, look(Replica{Silent: 100 * time.Millisecond, Lag: 60}), "heard from again, not caught up")
	assert.Equal(t, healthy, look(Replica{Current: true}), "caught up")
	assert.Len(t, lines(), 2)
	assert.Contains(t, lines()[1], "current again")
	look(Replica{Current: true})
	assert.Len(t, lines(), 2, "logged once")

	s.noteReplicas([]Replica{{Server: "s2", Leader: true, Current: true}})
	assert.Equal(t, map[string]bool{"s2": false}, s.StuckServers(), "servers that left the stream are forgotten")
}

func TestReplicaStuck(t *testing.T) {
	assert.False(t, Replica{Leader: true, Silent: time.Hour}.Stuck(time.Second))
	assert.False(t, Replica{Current: true, Silent: time.Hour}.Stuck(time.Second), "current: the leader heard from it lately")
	assert.False(t, Replica{Silent: 999 * time.Millisecond}.Stuck(time.Second))
	assert.True(t, Replica{Silent: time.Second}.Stuck(time.Second))
}
