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

// Stuck reports whether r's server needs an operator: its replica is not
// current, and the stream's leader has not heard from it for silence, or
// it has been behind for silence already (behind, by the caller's looks).
// A server that is down, or cut from the leader, is so; so is one whose
// JetStream store failed a write (a full disk): it stops applying the
// stream, and stays behind until it is restarted, even once space is
// freed, while the stream goes on without it.
func (r Replica) Stuck(silence, behind time.Duration) bool {
	return !r.Leader && !r.Current && (r.Silent >= silence || behind >= silence)
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
	behind  map[string]time.Time // since when each replica not current has been so, by the store's clock
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
// fails (no leader, no connection) changes nothing; a failure is logged at
// debug level.
func (s *Store) WatchReplicas(ctx context.Context) {
	t := s.cfg.Clock.NewTicker(replicaCheckEvery)
	defer t.Stop()
	for {
		if s.nc.Status() == nats.CONNECTED {
			rs, err := s.Replicas(ctx)
			switch {
			case err != nil:
				s.log.Debug("the look at the bucket's replicas failed", slog.String("bucket", s.cfg.Bucket), slog.Any("err", err))
			case len(rs) > 0:
				s.noteReplicas(rs, s.cfg.Clock.Now())
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// noteReplicas records a look at the replicas at now, and logs what
// changed.
func (s *Store) noteReplicas(rs []Replica, now time.Time) {
	w := &s.replicas
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stuck == nil {
		w.stuck, w.behind = map[string]bool{}, map[string]time.Time{}
	}
	w.servers = w.servers[:0]
	for _, r := range rs {
		w.servers = append(w.servers, r.Server)
		since, ok := w.behind[r.Server]
		switch {
		case r.Current:
			delete(w.behind, r.Server)
		case !ok || now.Before(since): // newly behind, or the clock went back
			since = now
			w.behind[r.Server] = now
		}
		stuck := r.Stuck(s.cfg.ReplicaSilence, now.Sub(since))
		switch {
		case stuck && !w.stuck[r.Server]:
			s.log.Error("a server of the bucket's stream needs a restart: its replica has not been current for "+
				max(r.Silent, now.Sub(since)).Round(time.Second).String()+"; it is down, cut off from the others, or its JetStream store failed a write "+
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
			delete(w.behind, name)
		}
	}
}
