package chaos

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/flowstate-io/flowstate/internal/clock"
)

// maxJump bounds a jump of a worker's clock, and its total jump, either
// way.
const maxJump = 60 * time.Second

// clockFile is worker w's control file (FLOWSTATE_CHAOSCLOCK).
func (s *system) clockFile(w int) string {
	return filepath.Join(s.clockDir, fmt.Sprintf("worker-%d.clock", w))
}

// clockFault draws a clock fault on one worker (a worker built with the
// chaosclock tag, given its control file): its clock jumps forward or back
// (its total jump stays within maxJump, and stays), or runs at x0.5 or x2
// for a few seconds, then at x1 again; or, one time in four, two workers'
// clocks jump at once.
func (n *nemesis) clockFault() *fault {
	w := n.rng.IntN(len(n.s.workers))
	switch x := n.rng.IntN(4); {
	case x == 0 && len(n.s.workers) > 1:
		return n.clockJumps(w, (w+1+n.rng.IntN(len(n.s.workers)-1))%len(n.s.workers))
	case x < 2:
		return n.clockJump(w)
	default:
		return n.clockRate(w)
	}
}

// clockJumps jumps the clocks of workers v and w at once, each as
// clockJump does (the lease's holder and a waiter may then disagree by up
// to twice maxJump).
func (n *nemesis) clockJumps(v, w int) *fault {
	a, b := n.clockJump(v), n.clockJump(w)
	return &fault{kind: kindClock, what: a.what + " AND " + b.what,
		inject: func() error {
			if err := a.inject(); err != nil {
				return err
			}
			return b.inject()
		}}
}

// clockOf returns worker w's clock setting, its control file and its name.
func (n *nemesis) clockOf(w int) (*clock.Control, string, string) {
	if n.clocks == nil {
		n.clocks = make([]clock.Control, len(n.s.workers))
		for i := range n.clocks {
			n.clocks[i].Rate = 1
		}
	}
	return &n.clocks[w], n.s.clockFile(w), n.s.workers[w].name
}

// clockJump jumps worker w's clock forward or back by up to maxJump, to an
// offset within maxJump of real time, where it stays.
func (n *nemesis) clockJump(w int) *fault {
	ctl, path, name := n.clockOf(w)
	jump := time.Duration(n.rng.Int64N(int64(2*maxJump)+1)) - maxJump
	if to := ctl.Offset + jump; to > maxJump || to < -maxJump {
		jump = -jump // the other way stays within maxJump
	}
	to := ctl.Offset + jump
	return &fault{kind: kindClock, what: fmt.Sprintf("jump the clock of %s by %v (to %v from real time)", name, jump.Round(time.Millisecond), to.Round(time.Millisecond)),
		inject: func() error {
			ctl.Offset = to
			return clock.WriteControl(path, *ctl)
		}}
}

// clockRate runs worker w's clock at x0.5 or x2 for a few seconds.
func (n *nemesis) clockRate(w int) *fault {
	ctl, path, name := n.clockOf(w)
	rate := 0.5
	if n.rng.IntN(2) == 0 {
		rate = 2
	}
	d := n.between(2*time.Second, 10*time.Second)
	return &fault{kind: kindClock, what: fmt.Sprintf("run the clock of %s at x%v for %v", name, rate, ms(int64(d))), hold: d,
		inject: func() error {
			ctl.Rate = rate
			return clock.WriteControl(path, *ctl)
		},
		heal: func() error {
			ctl.Rate = 1
			return clock.WriteControl(path, *ctl)
		}}
}
