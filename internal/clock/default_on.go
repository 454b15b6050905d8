//go:build chaosclock

package clock

import (
	"os"
	"sync"
)

// Default is the clock a process uses. Built with the chaosclock tag, for
// the robustness test only: with FLOWSTATE_CHAOSCLOCK naming a file, a
// Controlled clock that follows it for the life of the process; without,
// Real.
func Default() Clock { return defaultClock() }

var defaultClock = sync.OnceValue(func() Clock {
	path := os.Getenv(ControlEnv)
	if path == "" {
		return Real
	}
	c := NewControlled(Real)
	go c.Follow(path, ControlPoll, nil)
	return c
})
