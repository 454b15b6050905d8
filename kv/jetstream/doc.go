// Package jetstream is a kv.Shared on a NATS JetStream key-value bucket,
// which several workers share: Open returns a Store, a kv.Store that is also
// kv.Conditional and a kv.Watcher. Package kv and the domain do not link
// nats.go; only this package and the daemon that wires it do.
//
// Keys and values are stored as given: key k is the bucket's key k (subject
// $KV.<bucket>.k), so `nats kv get <bucket> <key>` shows what was put. Keys
// are made of letters, digits and - / _ = . (no leading, trailing or double
// dot); '/' is part of a key, not a separator.
//
// Revisions are the stream's sequence numbers: per key they are the bucket's
// revisions, and across keys they order every write of every process.
//
// Epoch: the bucket holds one reserved key (EpochKey) whose value, 16 random
// hex digits, names the bucket's lineage. The first process to find it
// missing creates it with a create-only write, so that exactly one value
// wins. Clear purges the bucket and creates a new epoch; a bucket wiped or
// recreated by anyone else loses the key, and a Watch notices (from the
// key's deletion, from sequence numbers going back, or from its periodic
// read of the key) and starts over with kv.OpReset at the new epoch; deleting
// the key alone starts a new epoch over the keys that remain. The epoch of a
// write's kv.Revision is the one this store last saw.
//
// Availability: every request is bounded by OpTimeout. A write that finds
// JetStream unavailable (no quorum, no stream, no connection, timeout)
// returns an error wrapping kv.ErrUnavailable, and so does every write after
// it, at once, until a probe (every ProbeInterval) finds the bucket
// taking writes again (it writes a deletion of ProbeKey); the probe also
// recreates a bucket that was deleted.
// So a worker answers quickly while JetStream is down, and recovers by
// itself.
//
// A server whose JetStream failed can stay up and answer every JetStream
// request "temporarily unavailable", or keep a watch's consumer alive that
// delivers nothing, while the other servers serve. The store moves its
// connection to another server of the connection's pool when JetStream
// keeps failing through one: after a few attempts of Open or of the probe,
// after a few passes of a Watch in a row that ended in an error, or a few
// attempts in a row to replace a stuck consumer (failover.go).
//
// A Watch's consumer outlasts a partition between its server and the
// watch's: it pauses, and goes on where it was once the route is back,
// with no request to JetStream (creating a consumer takes the cluster's
// meta leader, which a server back from a partition can make step down
// for an election timeout). A watch that has delivered nothing for three
// heartbeats while a write the store saw stored is ahead of it (its
// consumer's server is cut off, or its stream is behind) makes another
// consumer from where it is, and lets the stuck one go only once it has
// one; a watch whose consumer the server no longer has (asked after two
// silent heartbeats) starts over (watch.go).
//
// Read barrier: LastRevision writes a deletion of ProbeKey through the
// stream's leader, which numbers it after every write it committed, and
// returns its sequence number; the callers waiting at once share one such
// write (rounds.go).
//
// Time: OpTimeout, CheckInterval, ProbeInterval and the deadlines of the
// puts in flight are measured on Config.Clock, the process's clock, so
// that a test can make it jump or drift; the client library's own waits
// (its default bound of a request whose context has no deadline, its
// pings and reconnects, a watch's idle heartbeats) stay on real time.
// None of them decides what is stored or acknowledged: a wait that ends
// early or late makes a write's outcome unknown, never a wrong one.
//
// Replicas: a server of a replicated bucket whose JetStream store fails a
// write (a full disk) disables its JetStream and stays behind, its replica
// not current, until it is restarted, even once space is freed; the
// stream goes on with the others while they have a quorum. WatchReplicas
// asks the stream's leader for the replicas every few seconds and logs,
// once per condition, a server whose replica the leader has not heard from
// for ReplicaSilence (it cannot tell such a server from one that died or is
// cut off), and once when it is current again; StuckServers says which.
//
// A write whose value, with its headers, passes the connection's max
// payload fails with an error wrapping kv.ErrTooLarge; nothing is sent.
//
// Server version: conditional writes fenced on another key use the header
// Nats-Expected-Last-Subject-Sequence-Subject, which stream leaders enforce
// from nats-server 2.11 (RequiredServerVersion); an older leader ignores
// it and stores the write. Open refuses such a server with a
// *ServerTooOldError: at once when the connected server's INFO names an
// older version, and otherwise when the bucket's stream leader (another
// server, in a cluster in the middle of an upgrade) stores a probe write
// whose fence cannot hold. A refused probe proves nothing (the fenced key
// may have moved, or a leader just elected may be behind): Open retries it
// like any unavailability.
//
// Writes in flight: PutAsync (the put of a state.Store) publishes a put
// without waiting, up to Window at once, and answers each with the
// stream's acknowledgement or an error within OpTimeout. A put may carry
// a condition on its key's last write (Nats-Expected-Last-Subject-Sequence),
// which the stream leader checks as it stores the put: a put that waited
// in a link cannot land after a later write of its key; the stream's
// refusal (wrong last sequence) is answered with kv.ErrRevisionMismatch,
// and does not mark JetStream unavailable. The puts go out
// on core NATS with a reply subject per slot of the window under one
// subscription, and the acknowledgements are read in place; a slot takes a
// new reply subject only after a put that ended unacknowledged, so a late
// acknowledgement is never taken for a later put's. It never retries (a
// retry of a "no responders" publish, from a timer, could store a put
// after a later one of the same key) and sends nothing while the
// connection is not up or a probe has not found JetStream back. A put in
// flight when the connection drops, or when the store closes, is answered
// with an error wrapping kv.ErrUnavailable at once. Such a write's outcome
// is unknown, not "not stored": the stream may have taken it. On a
// connection with a reconnect buffer (the worker's store connection has
// none), nats.go may also flush a put from the buffer once reconnected.
//
// Cost: a write is one JetStream round trip, which the window hides: up to
// Window writes are in flight at once, so the rate of acknowledged writes
// is bounded by the window over the round trip, not by the round trip
// alone. The measured rates, against the memory backend, are in
// docs/performance.md.
package jetstream
