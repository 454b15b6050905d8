package chaos

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/flowstate-io/flowstate/internal/clock"
)

// clockWired says whether the worker reads its time from internal/clock's
// Default, so that a build with the chaosclock tag follows a control file.
// Until it does, CHAOS_FAULTS=clock is refused (parseFaults).
const clockWired = false

// maxJump bounds a worker clock's total jump either way.
const maxJump = 60 * time.Second

// clockFile is worker w's control file (FLOWSTATE_CHAOSCLOCK).
func (s *system) clockFile(w int) string {
	return filepath.Join(s.clockDir, fmt.Sprintf("worker-%d.clock", w))
}

// clockFault draws a clock fault on one worker (a worker built with the
// chaosclock tag, given its control file): its clock jumps forward or back
// (its total jump stays within maxJump, and stays), or runs at x0.5 or x2
// for a few seconds, then at x1 again.
func (n *nemesis) clockFault() *fault {
	w := n.rng.IntN(len(n.s.workers))
	if n.clocks == nil {
		n.clocks = make([]clock.Control, len(n.s.workers))
		for i := range n.clocks {
			n.clocks[i].Rate = 1
		}
	}
	ctl := &n.clocks[w]
	path := n.s.clockFile(w)
	name := n.s.workers[w].name
	if n.rng.IntN(2) == 0 {
		to := time.Duration(n.rng.Int64N(int64(2*maxJump)+1)) - maxJump
		jump := to - ctl.Offset
		return &fault{kind: kindClock, what: fmt.Sprintf("jump the clock of %s by %v (to %v from real time)", name, jump, to),
			inject: func() error {
				ctl.Offset = to
				return clock.WriteControl(path, *ctl)
			}}
	}
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
