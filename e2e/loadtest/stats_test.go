package main

import (
	"math"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestSpreadIsTheMedianAndRangeOfTheMeasuredRuns(t *testing.T) {
	assert.Equal(t, spread{med: 2, min: 1, max: 9, n: 3}, spreadOf([]float64{9, 1, 2}))
	assert.Equal(t, spread{med: 2.5, min: 1, max: 9, n: 4}, spreadOf([]float64{9, 1, 2, 3}))
	assert.Equal(t, spread{med: 4, min: 4, max: 4, n: 1}, spreadOf([]float64{math.NaN(), 4}))
	assert.Zero(t, spreadOf([]float64{math.NaN()}).n)
}

func TestCPUTimeAndMemoryOfThisProcessAreRead(t *testing.T) {
	var cpu time.Duration
	var err error
	for deadline := time.Now().Add(5 * time.Second); cpu == 0 && err == nil && time.Now().Before(deadline); {
		cpu, err = cpuTime(os.Getpid()) // spins until a clock tick is counted
	}
	assert.NoError(t, err)
	assert.Positive(t, cpu)
	m, err := memStatus(os.Getpid())
	assert.NoError(t, err)
	assert.Positive(t, m.rss)
	assert.GreaterOrEqual(t, m.peak, m.rss)
	u, err := readUsage(0, os.Getpid())
	assert.NoError(t, err)
	assert.Positive(t, u.total)
}
