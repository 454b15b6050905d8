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
// writes again by itself; past it the nemesis restarts the server (and
// says so in its log).
const recoverWithin = 15 * time.Second

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
	var from int64 // the server's output before the fault
	f.inject = func() error {
		from = srv.Output().Len()
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
		f.what += fmt.Sprintf("; s%d NOT A CURRENT REPLICA within %v of the free (%s): restarted it", d.server, recoverWithin, n.replicaState(d.server))
		if err := srv.Restart(); err != nil {
			return err
		}
		return n.awaitStream()
	}
	return f
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
