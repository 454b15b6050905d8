package jetstream

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// DefaultReplicaSilence is Config.ReplicaSilence's default.
const DefaultReplicaSilence = 30 * time.Second

// replicaCheckEvery is how often WatchReplicas asks for the stream's
// information, by the store's clock.
const replicaCheckEvery = 5 * time.Second

// Replica is one server's replica of the bucket's stream, as the stream's
// leader reports it.
type Replica struct {
	Server  string        // the server's name
	Leader  bool          // it leads the stream
	Current bool          // it has every write the leader has
	Silent  time.Duration // since the leader last heard from it; 0 for the leader
	Lag     uint64        // writes it is behind, as the leader knows it
}

// Stuck reports whether r's server needs an operator: the stream's leader
// has not heard from it for silence. A server that is down, or cut from
// the leader, is so; so is one whose JetStream store failed a write (a
// full disk): it disables its JetStream and stays behind, its replica not
// current, until it is restarted, even once space is freed, while the
// stream goes on without it.
func (r Replica) Stuck(silence time.Duration) bool {
	return !r.Leader && !r.Current && r.Silent >= silence
}

// Replicas returns the replicas of the bucket's stream, the leader's
// first, as the stream's leader reports them; none for a stream that has no
// leader now or is not replicated.
func (s *Store) Replicas(ctx context.Context) ([]Replica, error) {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	info, err := s.handles().stream.Info(ctx)
	if err != nil {
		return nil, s.wrap("stream info", err)
	}
	c := info.Cluster
	if c == nil || c.Leader == "" {
		return nil, nil
	}
	out := []Replica{{Server: c.Leader, Leader: true, Current: true}}
	for _, p := range c.Replicas {
		if p != nil {
			out = append(out, Replica{Server: p.Name, Current: p.Current, Silent: p.Active, Lag: p.Lag})
		}
	}
	return out, nil
}

// replicaWatch is what WatchReplicas found at its last look.
type replicaWatch struct {
	mu      sync.Mutex // guards the fields below
	servers []string   // the bucket's servers at the last look, sorted
	stuck   map[string]bool
}

// StuckServers returns the servers of the bucket's replicas at the last
// look of WatchReplicas, each with whether it is stuck (Replica.Stuck):
// it needs an operator, a restart once its disk has room if its store
// failed.
func (s *Store) StuckServers() map[string]bool {
	w := &s.replicas
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]bool, len(w.servers))
	for _, name := range w.servers {
		out[name] = w.stuck[name]
	}
	return out
}

// WatchReplicas looks at the bucket's replicas every few seconds of the
// store's clock until ctx ends, and logs once when a replica becomes
// stuck (Replica.Stuck after Config.ReplicaSilence), and once when it is
// current again; StuckServers says what the last look found. A look that
// fails (no leader, no connection) changes nothing.
func (s *Store) WatchReplicas(ctx context.Context) {
	t := s.cfg.Clock.NewTicker(replicaCheckEvery)
	defer t.Stop()
	for {
		if s.nc.Status() == nats.CONNECTED {
			if rs, err := s.Replicas(ctx); err == nil && len(rs) > 0 {
				s.noteReplicas(rs)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// noteReplicas records a look at the replicas, and logs what changed.
func (s *Store) noteReplicas(rs []Replica) {
	w := &s.replicas
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stuck == nil {
		w.stuck = map[string]bool{}
	}
	w.servers = w.servers[:0]
	for _, r := range rs {
		w.servers = append(w.servers, r.Server)
		stuck := r.Stuck(s.cfg.ReplicaSilence)
		switch {
		case stuck && !w.stuck[r.Server]:
			s.log.Error("a server of the bucket's stream needs a restart: the stream's leader has not heard from its replica for "+
				r.Silent.Round(time.Second).String()+"; it is down, cut off from the others, or its JetStream store failed a write "+
				"(a full disk: it logged \"Critical write error\" and \"JetStream out of resources, will be DISABLED\", and stays behind "+
				"until it is restarted, even once space is freed): give its store room and restart it",
				slog.String("bucket", s.cfg.Bucket), slog.String("server", r.Server), slog.Duration("silent", r.Silent),
				slog.Uint64("lag", r.Lag), slog.String("leader", rs[0].Server))
		case !stuck && w.stuck[r.Server] && r.Current:
			s.log.Info("a server of the bucket's stream is current again", slog.String("bucket", s.cfg.Bucket),
				slog.String("server", r.Server))
		case !stuck && w.stuck[r.Server]:
			stuck = true // heard from again, not caught up yet
		}
		w.stuck[r.Server] = stuck
	}
	slices.Sort(w.servers)
	for name := range w.stuck {
		if !slices.Contains(w.servers, name) {
			delete(w.stuck, name) // no longer a replica of the stream
		}
	}
}
