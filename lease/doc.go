// Package lease elects one holder among processes that share a store: a
// lease kept in one key of a kv.Shared store, taken and renewed with
// compare-and-set on the key's revision. The flow state workers use it to
// choose the one that writes the aggregate key and publishes.
//
// # Rules
//
// The key holds the id of its holder. The holder renews it every TTL/3 with
// a compare-and-set on its last revision, and deems itself the holder for
// 2/3 of the TTL after it sent its last successful renewal. The others take
// the lease over, with a compare-and-set on the revision they last saw,
// when they have seen no write of the key for a TTL by their own clock, or
// at once when it is deleted (its holder released it on stop). So clocks
// are never compared across machines, a holder stops deeming itself one
// before anyone may take over (while the clocks run alike: see Clocks), and
// exactly one takeover wins. A write the holder makes on the lease's behalf
// is fenced on the key's revision (WithFence): the store refuses it from a
// holder that lost the lease. A lease belongs to one epoch of the store: a
// store that starts over starts without a holder.
//
// The caller feeds the lease every event of the store's watch (Observe: the
// key's writes, and the watch's resets and syncs) and drives it: Tick, or
// Run with a ticker of its clock. Time comes from Config.Clock
// (internal/clock), so tests drive a lease with a manual clock and no sleep.
//
// # Clocks
//
// The lease's safety rests on the store, not on a clock. Every write of the
// key is a compare-and-set on its last revision, so one takeover of a
// revision wins and the renewal of a holder that lost the lease is refused;
// every write made on the lease's behalf is fenced on the key's revision,
// which the stream's leader checks in the stream's order, so it is stored
// only while the key's last write is its writer's own. Two holders' fenced
// writes (the aggregate key's) never interleave, whatever any clock does.
//
// Clocks decide when a holder deems the lease its own (and publishes) and
// when the others take over: availability. Each process measures on its
// own clock, monotonic within the process (clock.Real), and never compares
// its readings with another's. A holder deems the lease its own while less
// than 2/3 of the TTL has passed since it sent its last successful write of
// the key: sent, not acknowledged, because the others can see the write
// only after it was sent. A clock that reads before that moment went back:
// the time passed is unknown, so the holder stops deeming the lease its own
// until its next renewal succeeds. The others take over after a TTL of
// silence since they last saw a write; one whose clock went back measures
// the silence again from then. One holder at a time deems the lease its own
// as long as no clock jumps and no other's clock runs more than 1.5 times
// as fast as the holder's (a TTL against 2/3 of it).
//
// What a fault of one process's clock costs (TTL 3 s, jumps of J up to a
// minute, rates of x0.5 and x2):
//
//   - the holder's clock jumps forward: it stops deeming the lease its own
//     until its next renewal, at once (its ticker fires on the jump);
//   - another's jumps forward past the TTL: it takes over at once; the
//     holder's next renewal is refused and it gives the lease up, so both
//     deem the lease theirs (both publish) for up to 2/3 of the TTL, and
//     the old holder's fenced writes are refused;
//   - the holder's clock jumps back: it stops deeming the lease its own at
//     once, and its ticks wait until its clock has caught up (J), so
//     another takes over after a TTL: no publisher for about a TTL;
//   - another's jumps back: its ticks wait J; should the holder die
//     meanwhile, the others take over, or it does a TTL after its ticks
//     resume;
//   - the holder's clock runs at x0.5: it renews every 2/3 of the TTL of
//     real time, within the others' TTL; cut from the store, it deems the
//     lease its own for 4/3 of the TTL while another takes over after one:
//     both for up to 1/3 of the TTL;
//   - another's runs at x2: it takes over after half a TTL of silence; with
//     the holder cut from the store, both deem the lease theirs for up to
//     1/6 of the TTL;
//   - the holder's at x2, or another's at x0.5: the lease expires sooner
//     or is taken over later: no publisher for up to a TTL more.
//
// None of them stores a fenced write of a holder that lost the lease, and
// none changes what a worker serves, which is what its watch applied
// (package state). Clocks that drift apart by more than x1.5 for good make
// the publisher change hands more often and two workers publish at once
// for longer; the fences still hold.
//
// # Writes
//
// A renewal is one write every TTL/3 (every second with the default TTL of
// 3 s), which a watch of the whole bucket (nats kv watch) shows. Writing
// less often would need a longer TTL, which delays a takeover after a
// holder dies, or a shorter validity, which leaves no margin for one slow
// renewal; so the rule is kept. Moving the key under a name a subject
// filter can leave out would make workers of two versions elect two
// holders during a rolling upgrade. To watch the state without the lease,
// watch the aggregate's key alone (nats kv watch <bucket> __flow/state) or
// leave the lease key's lines out of the output.
package lease
