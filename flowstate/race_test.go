//go:build race

package flowstate_test

// raceEnabled is true under -race, whose instrumentation allocates: the
// zero-allocation tests skip then. Their names say Allocat (Allocates,
// DoesNotAllocate), which is how make test runs them again without -race.
const raceEnabled = true
