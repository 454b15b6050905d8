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
// before anyone may take over, and exactly one takeover wins. A write the
// holder makes on the lease's behalf is fenced on the key's revision
// (WithFence): the store refuses it from a holder that lost the lease. A
// lease belongs to one epoch of the store: a store that starts over starts
// without a holder.
//
// The caller feeds the lease every event of the store's watch (Observe: the
// key's writes, and the watch's resets and syncs) and drives it: Tick, or
// Run with a real ticker. Time comes from Config.Now, so tests drive a
// lease with a fake clock and no sleep.
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
