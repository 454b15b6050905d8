package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// storeErrors matches what nats-server logs when it cannot write its store.
var storeErrors = regexp.MustCompile(`\[ERR\] .*(critical write error|no space|insufficient resources|resources exceeded).*`)

// diskSize is the size of the tmpfs under a server's store.
const diskSize = 64 << 20

// recoverWithin is how long after its disk is freed a server has to take
// writes again by itself; past it the nemesis waits for a worker to say
// that the server needs a restart, and restarts it (and says so in its
// log).
const recoverWithin = 15 * time.Second

// replicaSilence is the workers' --kv-replica-silence in a run with disk
// faults: a worker says a server needs a restart this long after the
// stream's leader last heard from it, and within a look (5 s) more.
const replicaSilence = 5 * time.Second

// What the workers say of a server of the bucket: it needs a restart, and
// it is current again.
var (
	restartSaid = regexp.MustCompile(`needs a restart.* server=(s\d)`)
	currentSaid = regexp.MustCompile(`is current again.* server=(s\d)`)
)

// tmpfs is a small tmpfs the test mounted, holding one server's store.
type tmpfs struct {
	dir    string
	server int // the server whose store it holds
}

// mountTmpfs mounts a tmpfs of size bytes under a new temporary
// directory and unmounts it at cleanup. It returns an error where
// mounting is not permitted (not root, no CAP_SYS_ADMIN).
func mountTmpfs(t testing.TB, size int) (*tmpfs, error) {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.Itoa(size)); err != nil {
		return nil, fmt.Errorf("mount a tmpfs on %s: %w", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount the tmpfs on %s: %v", dir, err)
		}
	})
	return &tmpfs{dir: dir}, nil
}

// fill writes a file until the tmpfs is full; it returns the bytes
// written.
func (d *tmpfs) fill() (int64, error) {
	f, err := os.Create(filepath.Join(d.dir, "fill"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for {
		k, err := f.Write(buf)
		n += int64(k)
		if errors.Is(err, syscall.ENOSPC) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if n > 2*diskSize {
			return n, io.ErrShortWrite // not a tmpfs of diskSize
		}
	}
}

// free removes the file fill wrote.
func (d *tmpfs) free() error { return os.Remove(filepath.Join(d.dir, "fill")) }

// diskFault fills the disk under one server's store, half the time after
// making that server the stream's leader, and frees it after a while.
// After the heal it waits until the bucket takes a write again; if it does
// not within recoverWithin, it restarts the server and says so.
func (n *nemesis) diskFault() *fault {
	d := n.s.disk
	srv := n.s.servers[d.server]
	f := &fault{kind: kindDisk, hold: n.between(3*time.Second, 10*time.Second)}
	lead := n.rng.IntN(2) == 0
	f.what = fmt.Sprintf("fill the disk of s%d", d.server)
	var from int64   // the server's output before the fault
	var filled int64 // when the fill began, by the history's clock
	var said []int64 // each worker's output before the fault
	f.inject = func() error {
		from, filled, said = srv.Output().Len(), n.h.now(), n.outputs()
		if lead {
			f.what += " (made the stream leader first: " + moveStreamLeader(n.nc, n.js, d.server) + ")"
		}
		k, err := d.fill()
		f.what += fmt.Sprintf(", %d MB written", k>>20)
		return err
	}
	f.heal = func() error {
		if err := d.free(); err != nil {
			return err
		}
		f.what += fmt.Sprintf(", freed after %v", ms(int64(f.hold)))
		if m := storeErrors.FindString(srv.Output().Since(from)); m != "" {
			f.what += fmt.Sprintf("; s%d logged %q", d.server, strings.TrimSpace(m))
		}
		took, ok := n.awaitWrite(recoverWithin)
		if ok {
			f.what += fmt.Sprintf("; a write was stored %v later", ms(int64(took)))
		} else {
			f.what += fmt.Sprintf("; NO WRITE STORED within %v", recoverWithin)
		}
		took, ok = n.awaitCurrent(d.server, recoverWithin)
		if ok {
			f.what += fmt.Sprintf("; s%d a current replica %v after the free", d.server, ms(int64(took)))
			return nil
		}
		f.what += fmt.Sprintf("; s%d NOT A CURRENT REPLICA within %v of the free (%s)", d.server, recoverWithin, n.replicaState(d.server))
		name := fmt.Sprintf("s%d", d.server)
		w, saidRestart := n.awaitSaid(restartSaid, name, said, replicaSilence+10*time.Second)
		if saidRestart {
			f.what += fmt.Sprintf("; %s said %s needs a restart (by %v after the fill)", w, name, ms(n.h.now()-filled))
		} else {
			f.what += fmt.Sprintf("; NO WORKER SAID %s NEEDS A RESTART within %v of the fill", name, ms(n.h.now()-filled))
		}
		restarted, before := time.Now(), n.outputs()
		if err := srv.Restart(); err != nil {
			return err
		}
		if err := n.awaitStream(); err != nil {
			return err
		}
		if _, ok := n.awaitCurrent(d.server, recoverWithin); ok {
			f.what += fmt.Sprintf("; restarted, a current replica %v later", ms(int64(time.Since(restarted))))
		} else {
			f.what += fmt.Sprintf("; restarted, NOT A CURRENT REPLICA %v later", ms(int64(time.Since(restarted))))
		}
		// The next fault waits until the workers have seen the server back.
		if !saidRestart {
			return nil
		}
		if w, ok := n.awaitSaid(currentSaid, name, before, 2*replicaCheck); ok {
			f.what += fmt.Sprintf("; %s said it is current again %v after the restart", w, ms(int64(time.Since(restarted))))
		} else {
			f.what += fmt.Sprintf("; NO WORKER SAID %s IS CURRENT AGAIN within %v of the restart", name, ms(int64(time.Since(restarted))))
		}
		return nil
	}
	return f
}

// replicaCheck is how often the workers look at the bucket's replicas.
const replicaCheck = 5 * time.Second

// outputs returns where each worker's output is now.
func (n *nemesis) outputs() []int64 {
	var at []int64
	for _, w := range n.s.workers {
		at = append(at, w.Output().Len())
	}
	return at
}

// awaitSaid waits, up to within, until a worker's output since from says
// re of server, and returns the worker's name.
func (n *nemesis) awaitSaid(re *regexp.Regexp, server string, from []int64, within time.Duration) (string, bool) {
	deadline := time.Now().Add(within)
	for {
		for w, p := range n.s.workers {
			if w < len(from) {
				if m := re.FindStringSubmatch(p.Output().Since(from[w])); m != nil && m[1] == server {
					return p.name, true
				}
			}
		}
		if time.Now().After(deadline) {
			return "", false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// awaitWrite writes the probe key of the nemesis until the stream stores a
// write, up to within; it returns how long that took.
func (n *nemesis) awaitWrite(within time.Duration) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < within {
		if _, err := n.publish(&nats.Msg{Subject: "$KV." + bucket + ".chaos/probe"}); err == nil {
			return time.Since(start), true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return within, false
}

// replicaState describes server i in the stream's cluster info: leader,
// or a replica with its lag.
func (n *nemesis) replicaState(i int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := n.js.Stream(ctx, streamName)
	if err != nil {
		return err.Error()
	}
	c := st.CachedInfo().Cluster
	if c == nil {
		return "no cluster info"
	}
	name := fmt.Sprintf("s%d", i)
	if c.Leader == name {
		return "leader"
	}
	for _, r := range c.Replicas {
		if r.Name == name {
			return fmt.Sprintf("current %v, offline %v, lag %d, last seen %v ago", r.Current, r.Offline, r.Lag, r.Active.Round(time.Millisecond))
		}
	}
	return "not a replica"
}

// awaitCurrent waits, up to within, until server i leads the stream or is
// a current replica of it; it returns how long that took.
func (n *nemesis) awaitCurrent(i int, within time.Duration) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < within {
		st := n.replicaState(i)
		if st == "leader" || strings.HasPrefix(st, "current true, offline false, lag 0") {
			return time.Since(start), true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return within, false
}
