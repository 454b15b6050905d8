// Package state keeps the live state of stream-processing flows: the
// aggregate of the reports that flownodes send with their heartbeats. It is a
// port of GreptimeDB's FlowStateManager with the same semantics, the same
// store layout and the same stored bytes, made incremental.
//
// It owns three things:
//
//   - Aggregate: every node's last report and, per flow, the per-field max.
//     Pure: no lock, no store, no clock. It checks capacity limits and
//     records which flows changed, for deltas.
//   - Manager: the state of one worker that alone holds it (--kv memory),
//     with GreptimeDB's semantics: the aggregate is the state, from which
//     GreptimeDB's keys and bytes are rendered when asked.
//   - Replica: the state of a store that several workers share (kv.Shared),
//     built on an Aggregate that its watch feeds; the publisher lease it
//     holds is package lease's.
//
// Both offer the same reads where they mean the same (Snapshot, Version,
// Delta, Nodes, EvictSilent, Size); a report goes to a Manager with
// Merge and to a Replica with Submit, each as one Report.
//
// It knows the domain, the value and its stored form (package flowstate),
// package kv and package lease; it does not know NATS
// (package consumer is the NATS edge, kv/jetstream the bucket) or msgpack
// (package codec). Its only goroutines are Replica.Run's (the watch, the
// lease, and the clock on the caller's), and Run waits for them before it
// returns.
//
// # Rules
//
// Arrival order: reports are applied in the order Merge is called (the
// Manager serialises its callers). A node's report replaces its previous
// report whole, whatever the times in it, so a node whose clock went back
// after a restart is not locked out; an empty report removes all of its
// flows.
//
// Max aggregation: per flow, each of state_size, last_exec_time_map and
// start_time_map is the max over the nodes that report that field for that
// flow. When the node holding the max lowers its value or stops reporting the
// flow, the max over the remaining nodes takes its place.
//
// Store layout: each node's last report is under __flow/state/node/{node_id}
// and the aggregate under __flow/state, both in serde_json's form of
// FlowStateValue (flowstate.AppendJSON). A Replica's shared store holds
// them (the publisher writes the aggregate key); a Manager keeps no store,
// and its tests check that its state renders exactly the keys and bytes that
// GreptimeDB's store would hold.
//
// Reset: GreptimeDB's KV is reset by a metasrv leader change; here a worker
// that restarts with --kv memory starts a new Manager, in a new epoch, empty,
// so no report from before it reappears. A shared store that is wiped starts
// a new epoch too (see "Following a shared store").
//
// Revision and epoch: every applied report gets a revision: a Manager's
// counter, a Replica's sequence number of the write in the store, so
// revisions strictly increase within an epoch (a Replica's with gaps).
// Revision 0 means nothing has been merged in the current epoch (GreptimeDB's
// get returning None); the value is then empty.
//
// Capacity: with Options.Limits (ReplicaOptions.Limits), a report that
// would take the state past MaxNodes nodes or MaxFlows distinct flows (a
// flow named in any map of a node's last report counts, its health's
// processed_rows and last_errors included) or MaxErrorBytes bytes of error
// messages is refused whole with a *CapacityError before anything changes;
// a known node's report that does not grow the state past a limit always
// passes.
//
// Deltas: Delta returns the flows whose aggregate entry changed since the
// previous Delta of the epoch (Base), with their entries now (none present:
// the flow left), at a cost that grows with the number changed. It asks
// clients to resync (Delta.Resync) when more than half the aggregate (at
// least 1,024 flows) changed, and on a Replica that has just become the
// publisher or read the store again.
//
// # Following a shared store
//
// With a store that several workers share (kv.Shared: a NATS JetStream
// bucket), a Replica does not aggregate the reports it is given: it follows
// the store (Replica.Run). Every worker watches the bucket and applies
// every node-key write, its own and the others', in the stream's order, to
// its in-memory aggregate, with the write's sequence number as revision.
// Workers that have applied the same writes hold the same state at the
// same revision, whoever wrote them; a restarted worker reads the bucket
// again and goes on from where it is. A watch that falls behind may skip a
// write the bucket already replaced; the state it has then is no state the
// bucket ever had, so the last exact state stays served, at its revision,
// until the watch has caught up (kv.Event.Exact).
//
// Whoever wrote a node's value (a worker, an operator, a bug), the watch
// applies it by one rule that depends on the value alone, the same live
// and loading (PROTOCOL.md, "What a worker applies from a shared store"): a
// FlowStateValue by serde_json's rules, its v3 fields by a report's, is
// the node's report, anything else is no value (the node is absent, as if
// its key were deleted), and a key that is not NodeKey of a node is
// ignored; StoreRefusals counts them. No flag of the reader takes part:
// workers with other limits hold one state. The limits are the writer's: a state
// past them, written from outside, is served as it is, and a report that
// would grow it further is refused. The aggregate key holds the served
// aggregate or nothing: while its JSON does not fit one value of the store,
// the publisher deletes it.
//
// Writes are pipelined (Submit). A report is checked by the Manager's
// check (sorted flows, the stale rule, capacity), against the state the
// watch made and this worker's writes in flight, and its node-key write
// sent without waiting for the store; its
// Completion is told the outcome, in the order of the reports, once the
// write is stored and this worker's watch has applied it (so that a get on
// this worker after the ack sees it), or why not: an error wrapping
// kv.ErrUnavailable if the store did not take it, its outcome is unknown,
// or the watch did not apply it within ApplyTimeout (never an
// acknowledgement of what was not stored). Each report is acknowledged
// with its own write's sequence number. Up to ReplicaOptions.Window
// reports wait for their answers; past that, Submit blocks. A later stored
// report of a node supersedes an earlier one that failed: each node's key
// holds its last write. A report's write moves through the phases of
// replica_write.go (queued, chained, sent, stored, refused, answered,
// abandoned), one function making every move.
//
// Every node-key write is conditional on the key's last write as this
// worker knows it (kv.AsyncPutter; on the bucket, the header
// Nats-Expected-Last-Subject-Sequence): the key's last write that the watch
// delivered in the epoch, a deletion or a write left out of the epoch
// included (0 for a key not written in it), or this worker's own last
// write of the node once the store has stored it, whichever is later. So
// a write that waited (in a stalled link, or with a stream leader that
// died) and was answered unavailable cannot land after a later write of
// its node: the store refuses it. A report of a node whose previous write
// from this worker the store has not answered yet is sent once that answer
// has come, conditioned on its revision if it was stored (on what the
// watch knows otherwise, so that at most one of the two lands); reports of
// other nodes do not wait for it, and answers still come in the order of
// the reports. A write the store refuses names the key's later write that
// beat it (its report through another worker that this worker's watch had
// not applied yet, or this worker's own write of unknown outcome): it
// waits for the watch to pass that write and is sent again, conditioned on
// it, as often as it is refused until its deadline, ApplyTimeout after
// Submit (replica_overtaken.go). Past that, it is answered ErrConflict, which wraps
// kv.ErrUnavailable: nothing was stored, and the node's next report,
// conditioned on what the watch applied by then, settles it. What the condition cannot catch is a report that reaches
// this worker after a later report of its node was stored: the README
// says how long a NATS link may hold one.
//
// The path of one acknowledged report crosses three goroutines and three
// channels, each for a reason:
//
//   - the worker's intake goroutine calls Submit: it takes a place in the
//     window (the window channel, whose capacity bounds the reports in
//     flight and blocks intake past it), encodes the report once and sends
//     its write, which takes one of the store's slots for puts in flight
//     (the JetStream store's free channel, which bounds the puts whose
//     answer is awaited);
//   - the goroutine of the store's answers (onStored) records the write's
//     sequence number, and posts the write of the same node chained after
//     it, if any, to the sender (sendLoop, one goroutine of Run's), so that
//     it never waits for a slot of the store itself: the answers it gives
//     are what free those slots;
//   - the watch's goroutine (onEvent) applies the write: it finds this
//     worker's report by that sequence number and applies the flows it
//     kept, without decoding the bytes it wrote (those are decoded only
//     when the watch delivers the write before the store's answer came);
//     the JetStream watch reads its ordered consumer's queue (the third
//     channel, where the connection's reader puts each message) with no
//     goroutine in between.
//
// Whichever of the last two settles the oldest report wakes Run's
// goroutine, which answers it, and the reports after it that are ready, in
// order, through their Completions: neither the watch nor the store's
// answers wait for a reply on a slow connection. The clock (Run's
// goroutine too, ApplyTimeout/8 of ReplicaOptions.Clock a tick) answers
// every report whose deadline,
// ApplyTimeout after Submit, has passed, whatever its write awaits: the
// store's answer, the write before it, or the watch. A write that is not
// sent (stale, refused, answered meanwhile) hands the writes chained
// after it on to be judged in turn, so none waits behind a write that
// nothing moves. The served state tells the worker of
// its changes on one channel (Changes), its own reports' included.
// Another worker's write is decoded (flowstate.AppendValueFlows). Either
// way the apply path allocates nothing per report in steady state.
//
// Reports of different nodes are different keys, so two workers merging at
// the same moment both land in the stream and every worker applies both:
// there is no read-modify-write of a shared aggregate, and nothing to
// lose. A get first runs Sync, a read barrier (a revision past every write
// the store had committed, then wait until the watch reaches it), so that
// it includes every report any worker acknowledged before it was sent, and
// revisions never go back from one get to the next, whichever worker
// answers.
//
// One worker at a time, the publisher, holds a lease (PublisherKey; package
// lease has its rules) that it renews with compare-and-set. Only it writes
// the aggregate key, fenced on its lease's revision so that the store
// refuses the write of a worker that lost the lease, only it evicts silent
// nodes (for every worker, with deletions conditional on each node's last
// write), and only it publishes; Flush returns ErrNotPublisher on the
// others. An aggregate write the store refuses while this worker still
// holds the lease (a server that does not honour the fence) is logged
// once, not taken for a lost lease: the state is still published. It
// serves as the publisher only once its watch has applied its own
// takeover, so that its state includes everything its predecessor could
// have published. The epoch is the store's (see package kv/jetstream): a
// wiped or recreated bucket starts a new one, and every worker starts over
// with it.
//
// # Cost
//
// GreptimeDB's FlowStateManager re-reads and re-decodes every node's
// report on every merge. Here the Aggregate keeps, per flow, the nodes that
// report it and their max: a scan while they are few (a flow usually runs on
// one flownode), one max-heap per field past eight. So a report costs time proportional to
// itself plus the report it replaces, times at most the logarithm of the
// number of nodes sharing each flow, and does not allocate in steady state.
// Copying the aggregate (Snapshot) and writing the aggregate key are the
// steps that grow with the aggregate; the sorted order is rebuilt (n log n)
// only when the set of flow ids changes, and the publisher writes the key
// at its own cadence, not per report.
package state
