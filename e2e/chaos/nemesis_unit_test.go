package chaos

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// In a pair, the first fault (a partition) is healed after its own hold
// even while the second's heal (a worker's restart) is still going on: a
// pair held a partition for the restart's time plus its hold, 11 s in a
// 10-minute run, past the checker's lag. Here b's heal waits until a is
// healed; done the old way round, it would wait for ever.
func TestPairHealsTheFirstFaultAfterItsHoldWhileTheSecondHeals(t *testing.T) {
	n := &nemesis{h: newHistory()}
	aHealed := make(chan struct{})
	a := &fault{kind: kindPartition, what: "a", hold: 50 * time.Millisecond,
		inject: func() error { return nil },
		heal:   func() error { close(aHealed); return nil }}
	b := &fault{kind: kindProcess, what: "b",
		inject: func() error { return nil },
		heal: func() error {
			select {
			case <-aHealed:
				return nil
			case <-time.After(10 * time.Second):
				return errors.New("a was not healed while b healed")
			}
		}}
	require.NoError(t, n.twoAtOnce(a, b))
	require.Len(t, n.log, 1)
	assert.Equal(t, "partition+process", n.log[0].kind)
	assert.NotContains(t, n.log[0].action, "done again")
}

// A second fault whose heal fails while the first holds is healed again
// once the first is healed, and the event says so.
func TestPairHealsTheSecondAgainWhenItsHealFailedDuringTheFirst(t *testing.T) {
	n := &nemesis{h: newHistory()}
	healedA := false
	a := &fault{kind: kindPartition, what: "a", hold: 10 * time.Millisecond,
		inject: func() error { return nil },
		heal:   func() error { healedA = true; return nil }}
	calls := 0
	b := &fault{kind: kindProcess, what: "b",
		inject: func() error { return nil },
		heal: func() error {
			calls++
			if calls == 1 {
				return errors.New("exited at start-up")
			}
			assert.True(t, healedA, "the second heal comes after the first fault's")
			return nil
		}}
	require.NoError(t, n.twoAtOnce(a, b))
	assert.Equal(t, 2, calls)
	assert.Contains(t, n.log[0].action, "exited at start-up: done again after the heal")
}

// A run draws each of its kinds coverEach times before the weights
// decide, so that a short run of a few kinds injects each of them, the
// rare disk and forget faults too.
func TestNemesisDrawsEachKindTwiceFirst(t *testing.T) {
	kinds := []string{kindPartition, kindClock, kindDisk, kindCorrupt, kindForget}
	for seed := range uint64(20) {
		n := &nemesis{kinds: kinds, rng: rand.New(rand.NewPCG(seed, 0))}
		got := map[string]int{}
		for range coverEach * len(kinds) {
			got[n.pickKind()]++
		}
		for _, k := range kinds {
			assert.Equal(t, coverEach, got[k], "seed %d: %s in the first %d draws", seed, k, coverEach*len(kinds))
		}
	}
}

func TestChaosSeedsOfACampaign(t *testing.T) {
	seeds, err := chaosSeeds("1351772025910587525, 4", "")
	require.NoError(t, err)
	assert.Equal(t, []uint64{1351772025910587525, 4}, seeds, "a list replays those seeds, in order")

	seeds, err = chaosSeeds("", "10")
	require.NoError(t, err)
	assert.Len(t, seeds, 10)
	for _, s := range seeds {
		assert.LessOrEqual(t, s, uint64(math.MaxInt64), "a seed fits CHAOS_SEED's parse")
	}

	seeds, err = chaosSeeds("", "")
	require.NoError(t, err)
	assert.Len(t, seeds, 1, "one random seed by default")

	for _, bad := range [][2]string{{"4,x", ""}, {"", "0"}, {"", "101"}, {"", "ten"}} {
		_, err := chaosSeeds(bad[0], bad[1])
		assert.Error(t, err, "%q", bad)
	}
}

func TestNoFaultIsARunOfTheClientsAlone(t *testing.T) {
	f, err := parseFaults("none")
	require.NoError(t, err)
	assert.Empty(t, f.kinds)
	assert.False(t, f.combo)
	assert.Equal(t, "none", f.String())
	assert.Empty(t, f.forMemory().kinds, "no memory run either")
	_, err = parseFaults("none,process")
	assert.Error(t, err, "none stands alone")
}
