package chaos

import (
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flowstate-io/flowstate/internal/clock"
)

// The clock faults write control files a Controlled clock accepts: a jump
// of at most maxJump keeps the worker's total offset within maxJump, a
// rate is x0.5 or x2 while it holds and x1 once healed.
func TestClockFaultsWriteControlsWithinTheirBounds(t *testing.T) {
	s := &system{clockDir: t.TempDir(), workers: []*proc{{name: "worker 0"}, {name: "worker 1"}}}
	n := &nemesis{s: s, rng: rand.New(rand.NewPCG(3, 0))}
	jumps, rates, pairs := 0, 0, 0
	offsets := make([]time.Duration, len(s.workers))
	for range 200 {
		f := n.clockFault()
		require.NoError(t, f.inject())
		for w := range s.workers {
			b, err := os.ReadFile(s.clockFile(w))
			if os.IsNotExist(err) {
				continue
			}
			require.NoError(t, err)
			ctl, err := clock.ParseControl(string(b))
			require.NoError(t, err, "worker %d's control file", w)
			assert.LessOrEqual(t, ctl.Offset.Abs(), maxJump, f.what)
			assert.LessOrEqual(t, (ctl.Offset - offsets[w]).Abs(), maxJump, f.what)
			offsets[w] = ctl.Offset
			assert.Contains(t, []float64{0.5, 1, 2}, ctl.Rate, f.what)
		}
		if f.heal == nil {
			jumps++
			if strings.Contains(f.what, " AND ") {
				pairs++
			}
			continue
		}
		rates++
		assert.GreaterOrEqual(t, f.hold, 2*time.Second)
		require.NoError(t, f.heal())
		for w := range s.workers {
			if b, err := os.ReadFile(s.clockFile(w)); err == nil {
				ctl, err := clock.ParseControl(string(b))
				require.NoError(t, err)
				assert.Equal(t, 1.0, ctl.Rate, "a healed clock runs at x1")
			}
		}
	}
	assert.Positive(t, jumps)
	assert.Positive(t, rates)
	assert.Positive(t, pairs, "two workers' clocks jumped at once")
}
