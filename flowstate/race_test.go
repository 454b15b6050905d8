//go:build race

package flowstate_test

const raceEnabled = true
