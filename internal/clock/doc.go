// Package clock is the time a process reads: Now, Since, timers, tickers
// and AfterFunc behind one interface, so that a test can make a process's
// time jump or drift. WithTimeout is context.WithTimeout on a clock: its
// context ends when the clock passes the timeout.
//
// Real is the system clock. Manual is a clock that moves only when told
// (Advance), for unit tests. Controlled follows another clock (Real in a
// process) with an offset that can jump and a rate that can change: every
// reading and every timer of the process moves with it, as in a process
// whose time source jumps (a wall-clock step, a VM paused and resumed) or
// runs fast or slow (drift). Its readings carry no monotonic reading, so
// durations computed from them see the jumps too.
//
// A process picks its clock with Default. In a normal build that is Real.
// In a build with the chaosclock tag (for the robustness test, never a
// release) and FLOWSTATE_CHAOSCLOCK set to a file, it is a Controlled
// clock that follows that file: the test writes the file (WriteControl)
// with the total jump so far and the rate, for example
//
//	offset=-30s rate=0.5
//
// and the process applies it within ControlPoll. A malformed file is
// ignored (the last good one stays in force).
package clock
