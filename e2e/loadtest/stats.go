package main

import "slices"

// spread is the median and range of one metric over the runs of a
// scenario; n is 0 when no run measured it.
type spread struct {
	med, min, max float64
	n             int
}

// spreadOf returns the spread of xs, skipping NaN (not measured).
func spreadOf(xs []float64) spread {
	var v []float64
	for _, x := range xs {
		if x == x {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return spread{}
	}
	slices.Sort(v)
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return spread{med: med, min: v[0], max: v[len(v)-1], n: len(v)}
}

// pairedRatio returns the spread of f(a[i]) / f(b[i]) over the rounds both
// scenarios ran: the runs of a round are seconds apart (run interleaves
// them), so each ratio cancels most of what the machine's load did to both.
func pairedRatio(a, b []runResult, f func(runResult) float64) spread {
	xs := make([]float64, min(len(a), len(b)))
	for i := range xs {
		xs[i] = f(a[i]) / f(b[i])
	}
	return spreadOf(xs)
}

// over returns the spread of f over runs.
func over[T any](runs []T, f func(T) float64) spread {
	xs := make([]float64, len(runs))
	for i, r := range runs {
		xs[i] = f(r)
	}
	return spreadOf(xs)
}
