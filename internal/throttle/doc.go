// Package throttle is the project's one log rate-limiter: a Throttle lets
// at most Max events through per window and counts the ones it holds back,
// so that a flood a remote peer (or a struggling connection) can trigger
// gives a few log lines, the next of which says how many were held back.
//
// It decides only whether to log; what is logged, and with which keys, is
// the caller's (consumer's logThrottled, cmd/worker's connection handlers).
// It starts no goroutine and reads the clock only when asked.
package throttle
