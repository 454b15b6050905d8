package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// forgetState is what the forget faults of a run keep: the last snapshot
// of every server's store, and when it was taken.
type forgetState struct {
	dir   string // snapshot folder (the run's): one sub-folder per server
	taken int64  // by the history's clock; 0: none yet
	// After the servers restarted from taking the snapshot: the epoch the
	// bucket named, and the stream's last sequence number, a bound at or
	// past the snapshot's last write.
	epoch   string
	lastSeq uint64
}

// forgetFault rolls stores back to a snapshot, as a restored backup or a
// power loss before the servers' lazy fsync would. At the first forget
// fault of a run (and half the time at later ones) it first takes a
// snapshot: every server stopped, its store copied, every server started
// again. It holds while the clients write on, then draws one of two
// variants: a coordinated power loss (every server stopped, every store
// rolled back, every server started), after which the store has forgotten
// acknowledged writes and the workers move to a kept epoch; or one replica
// of R3 rolled back alone, which the two others repair. It heals when
// JetStream takes a write and every worker serves again; after a
// coordinated power loss that lost writes (the stream had writes past the
// snapshot's), once the workers moved to an epoch that is neither the one
// before the fault nor the snapshot's, as a store that forgot requires (so
// that no other fault's own write lands in an epoch whose revisions repeat).
func (n *nemesis) forgetFault() *fault {
	f := &fault{kind: kindForget, hold: n.between(2*time.Second, 6*time.Second)}
	snap := n.forget.taken == 0 || n.rng.IntN(2) == 0
	all := n.rng.IntN(2) == 0
	one := n.rng.IntN(len(n.s.servers))
	f.lost = all
	if all {
		f.what = "forget (coordinated power loss): every server's store rolled back"
	} else {
		f.what = fmt.Sprintf("forget (one replica): the store of s%d alone rolled back", one)
	}
	f.inject = func() error {
		if !snap {
			f.what += fmt.Sprintf(" to the snapshot of %v", ms(n.forget.taken))
			return nil
		}
		took, err := n.snapshot()
		f.what += fmt.Sprintf(" to a new snapshot (servers down %v)", ms(int64(took)))
		return err
	}
	f.heal = func() error {
		start := time.Now()
		servers := []int{one}
		var before epochAt
		var lost bool
		if all {
			servers = []int{0, 1, 2}
			var err error
			if before, err = n.epoch(); err != nil {
				return fmt.Errorf("chaos: the epoch before a forget fault: %w", err)
			}
			last, err := n.lastSeq()
			if err != nil {
				return err
			}
			lost = last > n.forget.lastSeq
		}
		for _, i := range servers {
			n.s.servers[i].Stop(stopTimeout)
		}
		for _, i := range servers {
			if err := restoreDir(filepath.Join(n.forget.dir, fmt.Sprint(i)), n.s.dirs[i]); err != nil {
				return err
			}
		}
		for _, i := range servers {
			if err := n.s.servers[i].Restart(); err != nil {
				return err
			}
		}
		if err := n.awaitJetStream(); err != nil {
			return err
		}
		f.what += fmt.Sprintf("; JetStream took a write %v after the stop", ms(int64(time.Since(start))))
		if lost {
			ep, err := n.awaitEpochOtherThan(before.value, n.forget.epoch)
			if err != nil {
				return err
			}
			f.what += fmt.Sprintf("; a new epoch %s %v after the stop", ep, ms(int64(time.Since(start))))
		}
		took, err := n.awaitServing()
		f.what += fmt.Sprintf("; every worker served %v after the stop", ms(int64(took)))
		return err
	}
	return f
}

// snapshot stops every server, copies its store into the snapshot folder,
// starts it again and waits until JetStream takes a write; it returns how
// long the servers were down.
func (n *nemesis) snapshot() (time.Duration, error) {
	if n.forget.dir == "" {
		return 0, fmt.Errorf("chaos: a forget fault without a snapshot folder")
	}
	start := time.Now()
	for _, srv := range n.s.servers {
		srv.Stop(stopTimeout)
	}
	n.forget.taken = n.h.now()
	for i, dir := range n.s.dirs {
		if err := restoreDir(dir, filepath.Join(n.forget.dir, fmt.Sprint(i))); err != nil {
			return 0, err
		}
	}
	for _, srv := range n.s.servers {
		if err := srv.Restart(); err != nil {
			return 0, err
		}
	}
	if err := n.awaitJetStream(); err != nil {
		return time.Since(start), err
	}
	took := time.Since(start)
	ep, err := n.epoch()
	if err != nil {
		return took, fmt.Errorf("chaos: the epoch after a snapshot: %w", err)
	}
	last, err := n.lastSeq()
	n.forget.epoch, n.forget.lastSeq = ep.value, last
	return took, err
}

// lastSeq returns the bucket stream's last sequence number.
func (n *nemesis) lastSeq() (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := n.js.Stream(ctx, streamName)
	if err != nil {
		return 0, fmt.Errorf("chaos: stream %s: %w", streamName, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("chaos: stream %s: %w", streamName, err)
	}
	return info.State.LastSeq, nil
}

// awaitEpochOtherThan waits, bounded, until the bucket's epoch key names
// an epoch other than those given, and returns it.
func (n *nemesis) awaitEpochOtherThan(old ...string) (string, error) {
	start := time.Now()
	var last string
	for time.Since(start) < startTimeout {
		if ep, err := n.epoch(); err == nil {
			if last = ep.value; !slices.Contains(old, last) {
				return last, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return "", fmt.Errorf("chaos: the workers did not leave epoch %q within %v of a forget fault that lost writes", last, startTimeout)
}

// restoreDir makes dst a copy of src: what dst held is removed (dst
// itself stays: it may be a mount point).
func restoreDir(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(dst)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dst, e.Name())); err != nil {
			return err
		}
	}
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		return fmt.Errorf("chaos: copy the store %s to %s: %w", src, dst, err)
	}
	return nil
}

// awaitJetStream waits, bounded, until the cluster has a meta leader, the
// stream a leader, and the stream stores a write.
func (n *nemesis) awaitJetStream() error {
	if err := n.s.cluster.AwaitJetStream(startTimeout); err != nil {
		return fmt.Errorf("%w: %v", errNoQuorum, err)
	}
	if err := n.awaitStream(); err != nil {
		return err
	}
	if _, ok := n.awaitWrite(startTimeout); !ok {
		return fmt.Errorf("chaos: stream %s stored no write within %v of the servers' restart", streamName, startTimeout)
	}
	return nil
}

// awaitServing waits, bounded, until every worker has answered a get
// since the wait began (their get counts in the service's stats grow;
// the gets go out through each server in turn, as the final gets do) and
// a get was answered with a state; a worker that exited is started again,
// as a supervisor would. It returns how long that took.
func (n *nemesis) awaitServing() (time.Duration, error) {
	start := time.Now()
	for _, p := range n.s.workers {
		if p.Exited() {
			if err := p.start(n.h.now); err != nil {
				return time.Since(start), err
			}
			if err := p.awaitReady(); err != nil {
				return time.Since(start), err
			}
		}
	}
	var clients []*client
	for _, url := range strings.Split(n.s.urls, ",") {
		nc, err := connectTo(url, "chaos nemesis gets")
		if err != nil {
			return 0, err
		}
		defer nc.Close()
		clients = append(clients, &client{id: n.id, nc: nc, h: n.h, timeout: requestTimeout})
	}
	var before map[string]int
	served := map[string]bool{}
	for sent := 0; time.Since(start) < startTimeout; sent++ {
		counts := statCounts(n.nc)
		if before == nil || len(before) < len(n.s.workers) {
			before = counts
		}
		for id, k := range counts {
			if b, ok := before[id]; ok && k > b {
				served[id] = true
			}
		}
		o := clients[sent%len(clients)].do(input{kind: opGet})
		if len(served) == len(n.s.workers) && o.out.status == stOK {
			return time.Since(start), nil
		}
		if o.out.status != stOK {
			time.Sleep(100 * time.Millisecond) // a worker is not ready yet
		}
	}
	return time.Since(start), fmt.Errorf("chaos: %d of %d workers served a get within %v of a forget fault", len(served), len(n.s.workers), startTimeout)
}
