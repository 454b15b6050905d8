package jetstream

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// replicaLooks feeds noteReplicas looks at a stream led by s2 with a
// current s0 and s1 as the test says, at times the test moves.
type replicaLooks struct {
	s    *Store
	logs bytes.Buffer
	now  time.Time
}

func newReplicaLooks() *replicaLooks {
	l := &replicaLooks{now: time.Unix(1_700_000_000, 0)}
	l.s = &Store{cfg: Config{Bucket: "b", ReplicaSilence: 30 * time.Second}.withDefaults(),
		log: slog.New(slog.NewTextHandler(&l.logs, nil))}
	return l
}

func (l *replicaLooks) look(after time.Duration, s1 Replica) map[string]bool {
	l.now = l.now.Add(after)
	s1.Server = "s1"
	l.s.noteReplicas([]Replica{{Server: "s2", Leader: true, Current: true}, {Server: "s0", Current: true, Silent: time.Second}, s1}, l.now)
	return l.s.StuckServers()
}

func (l *replicaLooks) lines() []string {
	if l.logs.Len() == 0 {
		return nil
	}
	return strings.Split(strings.TrimSpace(l.logs.String()), "\n")
}

var (
	replicasHealthy = map[string]bool{"s0": false, "s1": false, "s2": false}
	replicasStuck   = map[string]bool{"s0": false, "s1": true, "s2": false}
)

// A replica the stream's leader has not heard from for ReplicaSilence is
// reported once, with its server, until it is current again, which is
// reported once too; StuckServers says so meanwhile.
func TestWatchReplicasReportsASilentServerOncePerCondition(t *testing.T) {
	l := newReplicaLooks()
	assert.Equal(t, replicasHealthy, l.look(0, Replica{Current: true}))
	assert.Equal(t, replicasHealthy, l.look(5*time.Second, Replica{Silent: 29 * time.Second, Lag: 40}), "not yet")
	assert.Empty(t, l.lines())

	assert.Equal(t, replicasStuck, l.look(5*time.Second, Replica{Silent: 30 * time.Second, Lag: 50}))
	assert.Equal(t, replicasStuck, l.look(5*time.Second, Replica{Silent: 35 * time.Second, Lag: 60}))
	lines := l.lines()
	assert.Len(t, lines, 1, "logged once")
	assert.Contains(t, lines[0], "level=ERROR")
	assert.Contains(t, lines[0], "needs a restart")
	assert.Contains(t, lines[0], "server=s1")
	assert.Contains(t, lines[0], "leader=s2")

	assert.Equal(t, replicasStuck, l.look(5*time.Second, Replica{Silent: 100 * time.Millisecond, Lag: 60}), "heard from again, not caught up")
	assert.Equal(t, replicasHealthy, l.look(5*time.Second, Replica{Current: true}), "caught up")
	assert.Len(t, l.lines(), 2)
	assert.Contains(t, l.lines()[1], "current again")
	l.look(5*time.Second, Replica{Current: true})
	assert.Len(t, l.lines(), 2, "logged once")

	l.s.noteReplicas([]Replica{{Server: "s2", Leader: true, Current: true}}, l.now)
	assert.Equal(t, map[string]bool{"s2": false}, l.s.StuckServers(), "servers that left the stream are forgotten")
}

// A replica the leader hears from but that stays behind (a server whose
// store failed a write while it led the stream answers its new leader and
// applies nothing) is reported once it has been behind at every look for
// ReplicaSilence, by the store's clock.
func TestWatchReplicasReportsAServerThatStaysBehind(t *testing.T) {
	l := newReplicaLooks()
	for range 6 {
		assert.Equal(t, replicasHealthy, l.look(5*time.Second, Replica{Lag: 100}))
	}
	assert.Equal(t, replicasHealthy, l.look(5*time.Second, Replica{Current: true}), "current between: the count starts over")
	for range 6 {
		assert.Equal(t, replicasHealthy, l.look(5*time.Second, Replica{Lag: 100}))
	}
	assert.Equal(t, replicasStuck, l.look(5*time.Second, Replica{Lag: 900}), "30 s behind")
	assert.Len(t, l.lines(), 1)

	l = newReplicaLooks()
	l.look(0, Replica{Lag: 100})
	assert.Equal(t, replicasHealthy, l.look(-time.Minute, Replica{Lag: 100}), "a clock that went back starts the count over")
	assert.Equal(t, replicasHealthy, l.look(29*time.Second, Replica{Lag: 100}))
	assert.Equal(t, replicasStuck, l.look(time.Second, Replica{Lag: 100}))
}

func TestReplicaStuck(t *testing.T) {
	assert.False(t, Replica{Leader: true, Silent: time.Hour}.Stuck(time.Second, time.Hour))
	assert.False(t, Replica{Current: true, Silent: time.Hour}.Stuck(time.Second, time.Hour), "current: the leader heard from it lately")
	assert.False(t, Replica{Silent: 999 * time.Millisecond}.Stuck(time.Second, 0))
	assert.True(t, Replica{Silent: time.Second}.Stuck(time.Second, 0))
	assert.True(t, Replica{}.Stuck(time.Second, time.Second))
}
