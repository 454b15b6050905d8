package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// processFault draws one of the process faults: a worker killed and
// restarted or paused, a nats-server (half the time the stream leader)
// killed and restarted, every worker restarted at once, the bucket purged.
func (n *nemesis) processFault() *fault {
	choices := 4
	if n.js != nil {
		choices = 5
	}
	switch n.rng.IntN(choices) {
	case 0:
		return n.killFault()
	case 1:
		return n.pauseFault()
	case 2:
		return n.serverKillFault()
	case 3:
		return n.restartAllFault()
	default:
		return n.purgeFault()
	}
}

// killFault kills a worker, and restarts it at once.
func (n *nemesis) killFault() *fault {
	w := n.s.workers[n.rng.IntN(len(n.s.workers))]
	return &fault{kind: kindProcess, what: "SIGKILL and restart " + w.name,
		inject: func() error { return w.Kill() },
		heal:   func() error { return w.restart(n.h.now) }}
}

// pauseFault stops a worker with SIGSTOP for a while.
func (n *nemesis) pauseFault() *fault { return n.pauseWorker(n.rng.IntN(len(n.s.workers))) }

// pauseWorker stops worker i with SIGSTOP for a while.
func (n *nemesis) pauseWorker(i int) *fault {
	w := n.s.workers[i]
	d := n.between(500*time.Millisecond, 3*time.Second)
	return &fault{kind: kindProcess, what: fmt.Sprintf("SIGSTOP %s for %v, then SIGCONT", w.name, ms(int64(d))), hold: d,
		inject: func() error { w.Pause(); return nil },
		heal:   func() error { w.Resume(); return nil }}
}

// serverKillFault kills a nats-server, half the time the stream leader,
// and restarts it after a while.
func (n *nemesis) serverKillFault() *fault {
	s := n.s
	i, leader := n.rng.IntN(len(s.servers)), ""
	if n.js != nil && n.rng.IntN(2) == 0 {
		if l := streamLeader(n.js); l >= 0 {
			i, leader = l, " (the stream leader)"
		}
	}
	d := n.between(200*time.Millisecond, 2*time.Second)
	srv := s.servers[i]
	return &fault{kind: kindProcess, what: fmt.Sprintf("SIGKILL %s%s, restart after %v", srv.Name(), leader, ms(int64(d))), hold: d,
		inject: func() error { return srv.Kill() },
		heal: func() error {
			if err := srv.Restart(); err != nil || n.js == nil {
				return err
			}
			return n.awaitStream()
		}}
}

// restartAllFault kills every worker at once and restarts them.
func (n *nemesis) restartAllFault() *fault {
	return &fault{kind: kindProcess, what: "restart every worker at once (SIGKILL)",
		inject: func() error {
			var err error
			for _, p := range n.s.workers {
				err = cmpErr(err, p.Kill())
			}
			return err
		},
		heal: func() error {
			var wg sync.WaitGroup
			errs := make([]error, len(n.s.workers))
			for i, p := range n.s.workers {
				wg.Go(func() {
					if errs[i] = p.start(n.h.now); errs[i] == nil {
						errs[i] = p.awaitReady()
					}
				})
			}
			wg.Wait()
			var err error
			for _, e := range errs {
				err = cmpErr(err, e)
			}
			return err
		}}
}

// purgeFault purges the bucket's stream: a new epoch.
func (n *nemesis) purgeFault() *fault {
	f := &fault{kind: kindProcess, what: "purge stream " + streamName + " (a new epoch)"}
	f.inject = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := n.js.Stream(ctx, streamName)
		if err == nil {
			err = st.Purge(ctx)
		}
		if err != nil {
			f.what += ": failed: " + err.Error()
		}
		return nil
	}
	return f
}
