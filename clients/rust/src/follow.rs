//! The background task of a [`Watch`](crate::Watch): it follows the
//! worker's updates and decides, per update, whether to apply it or take a
//! snapshot.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::{Message, Subscriber};
use futures_util::StreamExt;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;

use crate::client::{Client, H_BASE, H_RESYNC, WatchMode, header, parse_version};
use crate::error::{Error, ErrorKind};
use crate::get::{Snapshot, canonical_uint, decode_state};
use crate::report::Delta;
use crate::value::{FlowId, FlowStateValue, Version};
use crate::watch::{Pending, PendingState};

/// Bounds of the pause between retries of a snapshot that failed.
const MIN_RETRY_WAIT: Duration = Duration::from_millis(100);
const MAX_RETRY_WAIT: Duration = Duration::from_secs(5);

/// How often a watch looks whether the connection reconnected (updates
/// published while it was down are lost: a snapshot tells what is current).
const RECONNECT_CHECK: Duration = Duration::from_millis(500);

/// How far past the revision held a delta may go before the watch checks it
/// with a snapshot instead of applying it: a worker's revisions count its
/// reports, and no delta of a live worker runs this far ahead of a client
/// that keeps up, while a forged one would hold every later delta off as
/// stale.
const MAX_REVISION_JUMP: u64 = 1 << 20;

/// What to do with a delta.
#[derive(Debug, PartialEq, Eq)]
enum Rule {
    /// Stale or a duplicate: it changes nothing.
    Skip,
    /// At or below the revision held, yet past the last snapshot: the worker
    /// numbers its deltas in order, so what is held may not be the worker's.
    /// A snapshot tells.
    Suspect,
    /// Apply it; its base, which the body must repeat.
    Apply(u64),
    /// A snapshot must tell what is current.
    Resync,
}

/// PROTOCOL.md's rule for a delta of version v and base `base` (None: the
/// header is missing or not a number) to a client at cur: apply it when its
/// epoch is cur's and `base <= cur.revision < v.revision`. A delta lists
/// every flow changed since its base with its entry now, so it brings any
/// revision from base on to its own: a snapshot taken between two deltas
/// goes on with deltas. Another epoch, a resync delta, a base past cur (a
/// delta was missed) or a revision more than [`MAX_REVISION_JUMP`] ahead
/// means a snapshot. `confirmed` is the revision of the last snapshot in
/// cur's epoch: a delta at or below cur but past it is [`Rule::Suspect`].
fn delta_rule(cur: &Version, confirmed: u64, v: &Version, base: Option<u64>, resync: bool) -> Rule {
    if v.epoch == cur.epoch && v.revision <= cur.revision {
        return if v.revision > confirmed {
            Rule::Suspect
        } else {
            Rule::Skip
        };
    }
    match base {
        Some(base)
            if !resync
                && v.epoch == cur.epoch
                && base <= cur.revision
                && v.revision - cur.revision <= MAX_REVISION_JUMP =>
        {
            Rule::Apply(base)
        }
        _ => Rule::Resync,
    }
}

/// Reads a delta update's Flow-State-Base-Revision and body: None when it
/// is a resync (Flow-State-Resync: 1), its base header is not a decimal
/// uint64 without sign or leading zero, or its body is invalid or names
/// another base. A delta it refuses is not applied: the watch takes a
/// snapshot instead.
pub(crate) fn read_delta(h: Option<&async_nats::HeaderMap>, payload: &[u8]) -> Option<Delta> {
    if header(h, H_RESYNC) == Some("1") {
        return None;
    }
    let base = header(h, H_BASE).and_then(canonical_uint::<u64>)?;
    Delta::from_msgpack(payload).ok().filter(|d| d.base == base)
}

/// The updates waiting for the follower, bounded in bytes: a task of its
/// own moves them off the subscription as they come, so that they never
/// wait in the subscription's channel (bounded by count only), and drops
/// them all past the bound.
struct Queue {
    state: Mutex<QueueState>,
    ready: Notify,
}

#[derive(Default)]
struct QueueState {
    msgs: VecDeque<Message>,
    bytes: usize,
    limit: usize,
    /// Updates were dropped since the follower last looked.
    overflow: bool,
    /// The subscription ended: the connection closed.
    closed: bool,
}

/// What a message holds in memory, near enough: its body, subjects and
/// headers.
fn msg_size(msg: &Message) -> usize {
    let headers = msg.headers.as_ref().map_or(0, |h| {
        h.iter()
            .map(|(k, vs)| {
                AsRef::<str>::as_ref(k).len() + vs.iter().map(|v| v.as_str().len()).sum::<usize>()
            })
            .sum()
    });
    msg.payload.len() + msg.subject.len() + msg.reply.as_ref().map_or(0, |r| r.len()) + headers
}

impl Queue {
    fn new(limit: usize) -> Arc<Self> {
        Arc::new(Queue {
            state: Mutex::new(QueueState {
                limit,
                ..QueueState::default()
            }),
            ready: Notify::new(),
        })
    }

    /// Moves the subscription's messages into the queue until it ends.
    async fn fill(self: Arc<Self>, mut sub: Subscriber) {
        while let Some(msg) = sub.next().await {
            let n = msg_size(&msg);
            {
                let mut q = self.state.lock().expect("queue lock");
                if q.bytes + n > q.limit {
                    q.msgs = VecDeque::new();
                    q.bytes = 0;
                    q.overflow = true;
                } else {
                    q.msgs.push_back(msg);
                    q.bytes += n;
                }
            }
            self.ready.notify_one();
        }
        self.state.lock().expect("queue lock").closed = true;
        self.ready.notify_one();
    }

    /// The next update, whether updates were dropped since the last call
    /// (then the update is None), and whether the subscription ended.
    fn pop(&self) -> Next {
        let mut q = self.state.lock().expect("queue lock");
        if std::mem::take(&mut q.overflow) {
            return Next::Dropped;
        }
        match q.msgs.pop_front() {
            Some(m) => {
                q.bytes -= msg_size(&m);
                Next::Msg(m)
            }
            None if q.closed => Next::Closed,
            None => Next::Empty,
        }
    }

    /// Drops the updates waiting and returns the last.
    fn drain(&self) -> Option<Message> {
        let mut q = self.state.lock().expect("queue lock");
        q.bytes = 0;
        std::mem::take(&mut q.msgs).pop_back()
    }
}

/// What [`Queue::pop`] found.
enum Next {
    Msg(Message),
    Dropped,
    Closed,
    Empty,
}

/// Stops the queue's filling thread when the follower ends.
struct Filler(Option<oneshot::Sender<()>>);

impl Drop for Filler {
    fn drop(&mut self) {
        if let Some(stop) = self.0.take() {
            let _ = stop.send(());
        }
    }
}

/// Starts moving sub's messages into a new queue of the client's bound, on
/// a thread of its own. async-nats holds a subscription's messages in a
/// channel bounded by count (`ConnectOptions::subscription_capacity`,
/// 65,536 by default), whatever their size: a filling task on the
/// runtime's workers waits its turn while the connection's task hands over
/// a burst of them, and under a flood of 1 MB messages that channel held
/// tens of megabytes. A thread the system schedules empties it as they
/// come, into the queue, which counts bytes.
fn queue(client: &Client, sub: Subscriber) -> Result<(Arc<Queue>, Filler), Error> {
    let q = Queue::new(client.inner.max_pending_bytes);
    let (stop, stopped) = oneshot::channel();
    let runtime = tokio::runtime::Handle::current();
    let filling = Arc::clone(&q);
    std::thread::Builder::new()
        .name("flowstate-watch".into())
        .spawn(move || {
            runtime.block_on(async move {
                tokio::select! {
                    _ = stopped => {},
                    _ = filling.fill(sub) => {},
                }
            })
        })
        .map_err(|e| Error::new(ErrorKind::Nats, "start the watch's thread").with_source(e))?;
    Ok((q, Filler(Some(stop))))
}

/// Subscribes the watch's client to subject.
pub(crate) async fn subscribe(client: &Client, subject: &str) -> Result<Subscriber, Error> {
    client
        .nats
        .subscribe(subject.to_string())
        .await
        .map_err(|e| {
            Error::new(ErrorKind::Nats, "subscribe failed")
                .on(subject)
                .with_source(e)
        })
}

/// The background task of a watch: it decides, per update, whether to apply
/// it or take a snapshot, and hands the consumer what it has not taken yet.
pub(crate) struct Follower {
    client: Client,
    pending: Arc<Mutex<Pending>>,
    bell: mpsc::Sender<()>,
    cur: Option<Version>, // the version handed over last
    connects: u64,        // the connection's connects, as last seen
    /// The revision of the last snapshot, in cur's epoch: the revisions
    /// above it were taken from updates.
    confirmed: u64,
    /// The highest revision of an update at or below cur's but above
    /// confirmed since the last snapshot (0: none).
    suspect: u64,
    /// The flows of the state handed over, so that deltas cannot take it
    /// past [`Options::max_flows`](crate::Options::max_flows).
    flows: HashSet<FlowId>,
    /// When the last snapshot was asked for.
    last_snapshot: Option<Instant>,
    /// The watch said that it dropped updates past its bound.
    said_dropped: bool,
}

impl Follower {
    pub(crate) fn new(
        client: Client,
        pending: Arc<Mutex<Pending>>,
        bell: mpsc::Sender<()>,
        connects: u64,
    ) -> Self {
        Follower {
            client,
            pending,
            bell,
            cur: None,
            connects,
            confirmed: 0,
            suspect: 0,
            flows: HashSet::new(),
            last_snapshot: None,
            said_dropped: false,
        }
    }

    pub(crate) async fn run(mut self, sub: Subscriber, mode: WatchMode) {
        let (q, _filler) = match queue(&self.client, sub) {
            Ok(q) => q,
            Err(e) => return self.push_error(e),
        };
        let snap = self.snapshot(&q).await;
        if mode == WatchMode::V1 {
            self.emit_snapshot(snap);
            return self.follow_full(&q).await;
        }
        if snap.chunks == 0 && mode == WatchMode::Auto {
            // A worker that predates v2 publishes no deltas.
            drop(_filler);
            let sub = match subscribe(&self.client, &self.client.inner.state_subject).await {
                Ok(s) => s,
                Err(e) => return self.push_error(e),
            };
            let (q, _filler) = match queue(&self.client, sub) {
                Ok(q) => q,
                Err(e) => return self.push_error(e),
            };
            let snap = self.snapshot(&q).await;
            self.emit_snapshot(snap);
            return self.follow_full(&q).await;
        }
        self.emit_snapshot(snap);
        self.follow_deltas(&q).await
    }

    /// Follows <prefix>.state.delta.
    async fn follow_deltas(&mut self, q: &Queue) {
        let mut tick = tokio::time::interval(RECONNECT_CHECK);
        loop {
            tokio::select! {
                _ = q.ready.notified() => {},
                _ = tick.tick() => if self.reconnected() {
                    self.resync(q).await;
                },
            }
            loop {
                match q.pop() {
                    Next::Empty => break,
                    Next::Closed => return self.closed(&self.client.inner.delta_subject.clone()),
                    Next::Dropped => {
                        self.say_dropped(&self.client.inner.delta_subject.clone());
                        self.resync(q).await;
                    }
                    Next::Msg(msg) => {
                        if !self.apply_delta(&msg) {
                            self.resync(q).await;
                        }
                    }
                }
            }
        }
    }

    /// Says, the first time only, that the watch dropped updates past its
    /// bound.
    fn say_dropped(&mut self, subject: &str) {
        if std::mem::replace(&mut self.said_dropped, true) {
            return;
        }
        let e = Error::new(
            ErrorKind::Limit,
            format!(
                "the watch dropped the updates waiting past {} bytes (Options::max_pending_bytes) and takes a snapshot (said once per watch)",
                self.client.inner.max_pending_bytes
            ),
        )
        .on(subject);
        self.push_error(e);
    }

    /// Applies a delta if its base allows; false when a snapshot must tell
    /// what is current. A stale or foreign message counts as applied.
    fn apply_delta(&mut self, msg: &Message) -> bool {
        let h = msg.headers.as_ref();
        let Ok(v) = parse_version(h) else {
            return true; // not the worker's
        };
        let cur = self.cur.as_ref().expect("a snapshot comes first");
        let base = header(h, H_BASE).and_then(canonical_uint);
        let rule = delta_rule(
            cur,
            self.confirmed,
            &v,
            base,
            header(h, H_RESYNC) == Some("1"),
        );
        let base = match rule {
            Rule::Skip => return true,
            Rule::Suspect => {
                self.suspect = self.suspect.max(v.revision);
                return false;
            }
            Rule::Resync => return false,
            Rule::Apply(base) => base,
        };
        let d = match read_delta(h, &msg.payload) {
            Some(d) if d.base == base => d,
            _ => return false,
        };
        for f in &d.flows {
            if f.is_gone() {
                self.flows.remove(&f.id);
            } else {
                self.flows.insert(f.id);
            }
        }
        self.cur = Some(v.clone());
        self.push(|p| match &mut p.state {
            Some(PendingState::Snapshot { version, value }) => {
                value.apply(&d.flows);
                *version = v;
            }
            Some(PendingState::Deltas { version, changes }) => {
                changes.extend(d.flows.iter().map(|f| (f.id, *f)));
                *version = v;
            }
            None => {
                p.state = Some(PendingState::Deltas {
                    version: v,
                    changes: d.flows.iter().map(|f| (f.id, *f)).collect(),
                })
            }
        });
        // Past the bound: a snapshot tells what is current, and fails when
        // the worker's state is past it too.
        self.flows.len() <= self.client.inner.max_flows
    }

    /// Follows <prefix>.state (v1): the newest update that is ready wins.
    async fn follow_full(&mut self, q: &Queue) {
        let mut tick = tokio::time::interval(RECONNECT_CHECK);
        loop {
            tokio::select! {
                _ = q.ready.notified() => {},
                _ = tick.tick() => if self.reconnected() {
                    self.resync(q).await;
                },
            }
            let mut batch = FullBatch::default();
            loop {
                match q.pop() {
                    Next::Empty => break,
                    Next::Closed => {
                        return self.closed(&self.client.inner.state_subject.clone());
                    }
                    Next::Dropped => {
                        self.say_dropped(&self.client.inner.state_subject.clone());
                        batch.mixed = true; // the newest may be among those dropped
                    }
                    Next::Msg(next) => batch.add(next),
                }
            }
            let FullBatch {
                newest,
                mixed,
                below,
            } = batch;
            match newest {
                Some(msg) => self.apply_full(q, &msg, mixed, below).await,
                None if mixed => self.resync(q).await,
                None => {}
            }
        }
    }

    /// Hands over a full update if it is the current epoch's and newer, and
    /// takes a snapshot when it is of another epoch, does not decode, comes
    /// at or below the revision held but past the last snapshot, runs too
    /// far ahead, or an older update of its epoch came after it (below).
    async fn apply_full(&mut self, q: &Queue, msg: &Message, mixed: bool, below: u64) {
        let Ok(v) = parse_version(msg.headers.as_ref()) else {
            return;
        };
        let cur = self.cur.clone().expect("a snapshot comes first");
        if !mixed && v.epoch == cur.epoch && below > self.confirmed {
            // Not taken on its word: a snapshot tells.
            self.suspect = self.suspect.max(below);
            return self.resync(q).await;
        }
        if !mixed && v.epoch == cur.epoch {
            if v.revision <= cur.revision {
                if v.revision > self.confirmed {
                    self.suspect = self.suspect.max(v.revision);
                    self.resync(q).await;
                }
                return;
            }
            if v.revision - cur.revision <= MAX_REVISION_JUMP
                && let Ok((version, value)) = decode_state(msg)
                && value.len() <= self.client.inner.max_flows
            {
                return self.push_snapshot(version, value);
            }
        }
        self.resync(q).await;
        // The update may be newer than the snapshot, in the snapshot's epoch.
        let cur = self.cur.clone().expect("set by resync");
        if v.epoch == cur.epoch
            && v.revision > cur.revision
            && v.revision - cur.revision <= MAX_REVISION_JUMP
            && let Ok((version, value)) = decode_state(msg)
            && value.len() <= self.client.inner.max_flows
        {
            self.push_snapshot(version, value);
        }
    }

    /// Takes a snapshot and hands it over if it is news.
    async fn resync(&mut self, q: &Queue) {
        let snap = self.snapshot(q).await;
        self.emit_snapshot(snap);
    }

    /// Gets the current state, no sooner than
    /// [`Options::snapshot_interval`](crate::Options::snapshot_interval)
    /// after the last, handing over the errors and retrying with a growing
    /// pause until it succeeds (the task ends when the watch is dropped).
    /// Just before each get it drops the updates waiting: the snapshot was
    /// asked for after they were published, so it covers them, and a storm
    /// of updates that each call for a snapshot costs one get per interval.
    async fn snapshot(&mut self, q: &Queue) -> Snapshot {
        let mut wait = MIN_RETRY_WAIT;
        loop {
            if let Some(last) = self.last_snapshot {
                tokio::time::sleep_until(last + self.client.inner.snapshot_interval).await;
            }
            self.last_snapshot = Some(Instant::now());
            q.drain();
            match self.client.get().await {
                Ok(s) => return s,
                Err(e) => self.push_error(e),
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(MAX_RETRY_WAIT);
        }
    }

    /// Hands over snapshot s unless it is older than the current state (a
    /// get served by a lagging worker): never backwards, except that the
    /// snapshot is the worker's word: one of the epoch held, below the
    /// revision held, replaces what is held when an update showed that
    /// revision was not the worker's (suspect) and the snapshot reached that
    /// update.
    fn emit_snapshot(&mut self, s: Snapshot) {
        let suspect = std::mem::take(&mut self.suspect);
        if let Some(cur) = &self.cur
            && cur.epoch == s.version.epoch
        {
            let r = s.version.revision;
            if r == cur.revision {
                self.confirmed = r;
                return;
            }
            if r < cur.revision && (suspect == 0 || r < suspect) {
                self.confirmed = self.confirmed.max(r);
                return;
            }
        }
        self.confirmed = s.version.revision;
        self.push_snapshot(s.version, s.value);
    }

    fn push_snapshot(&mut self, version: Version, value: FlowStateValue) {
        self.flows = value.flows().iter().map(|f| f.id).collect();
        self.cur = Some(version.clone());
        self.push(|p| p.state = Some(PendingState::Snapshot { version, value }));
    }

    fn push_error(&mut self, e: Error) {
        self.push(|p| p.error = Some(e));
    }

    /// Reports the end of the subscription: the connection closed.
    fn closed(&mut self, subject: &str) {
        self.push_error(
            Error::new(
                ErrorKind::Nats,
                "the subscription ended: the connection closed",
            )
            .on(subject),
        );
    }

    fn push(&mut self, f: impl FnOnce(&mut Pending)) {
        f(&mut self.pending.lock().expect("watch lock"));
        let _ = self.bell.try_send(()); // full: the consumer has not woken yet
    }

    /// Reports whether the connection reconnected since the last call.
    fn reconnected(&mut self) -> bool {
        let n = self
            .client
            .nats
            .statistics()
            .connects
            .load(Ordering::Relaxed);
        std::mem::replace(&mut self.connects, n) != n
    }
}

/// The full updates that queued up since the loop last looked: the newest
/// wins.
#[derive(Default)]
struct FullBatch {
    newest: Option<Message>,
    /// Updates of more than one epoch came, or some were dropped: the order
    /// between them is unknown, so only a snapshot tells what is current.
    mixed: bool,
    /// The highest revision of an update that came after a newer one of its
    /// epoch: the worker numbers its updates in order, so the newer one may
    /// be forged.
    below: u64,
}

impl FullBatch {
    fn add(&mut self, next: Message) {
        let Some(msg) = &self.newest else {
            self.newest = Some(next);
            return;
        };
        match (
            parse_version(msg.headers.as_ref()),
            parse_version(next.headers.as_ref()),
        ) {
            (Ok(a), Ok(b)) if a.epoch != b.epoch => {
                self.mixed = true;
                self.newest = Some(next)
            }
            (Ok(a), Ok(b)) if b.revision > a.revision => self.newest = Some(next),
            (Ok(a), Ok(b)) if b.revision < a.revision => self.below = self.below.max(b.revision),
            (Err(_), Ok(_)) => self.newest = Some(next),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(epoch: &str, revision: u64) -> Version {
        Version {
            epoch: epoch.into(),
            revision,
        }
    }

    fn update(epoch: &str, revision: u64) -> Message {
        let mut h = async_nats::HeaderMap::new();
        h.insert(crate::client::H_EPOCH, epoch);
        h.insert(crate::client::H_REVISION, revision.to_string().as_str());
        Message {
            subject: "flow.state".into(),
            reply: None,
            payload: bytes::Bytes::new(),
            headers: Some(h),
            status: None,
            description: None,
            length: 0,
        }
    }

    #[test]
    fn a_batch_of_full_updates_keeps_the_newest_and_notes_what_came_out_of_order() {
        for (what, updates, newest, mixed, below) in [
            (
                "higher revision wins",
                vec![("a", 3), ("a", 5)],
                ("a", 5),
                false,
                0,
            ),
            (
                // The worker numbers its updates in order: one that comes
                // after a newer one says the newer one may be forged.
                "a lower revision is noted",
                vec![("a", 5), ("a", 3), ("a", 4)],
                ("a", 5),
                false,
                4,
            ),
            (
                "a duplicate is not noted",
                vec![("a", 5), ("a", 5)],
                ("a", 5),
                false,
                0,
            ),
            (
                "another epoch is mixed",
                vec![("a", 5), ("b", 1)],
                ("b", 1),
                true,
                0,
            ),
        ] {
            let mut b = FullBatch::default();
            for (e, r) in updates {
                b.add(update(e, r));
            }
            let got = parse_version(b.newest.as_ref().unwrap().headers.as_ref()).unwrap();
            assert_eq!(got, v(newest.0, newest.1), "{what}");
            assert_eq!(b.mixed, mixed, "{what}");
            assert_eq!(b.below, below, "{what}");
        }
    }

    #[test]
    fn delta_rule_suspects_a_delta_at_or_below_the_revision_held_past_the_last_snapshot() {
        // Revision 20 held, taken from deltas after a snapshot at 10.
        let cur = v("a", 20);
        assert_eq!(
            delta_rule(&cur, 10, &v("a", 15), Some(14), false),
            Rule::Suspect
        );
        assert_eq!(
            delta_rule(&cur, 10, &v("a", 20), Some(19), false),
            Rule::Suspect
        );
        assert_eq!(
            delta_rule(&cur, 10, &v("a", 10), Some(9), false),
            Rule::Skip
        );
    }

    #[test]
    fn delta_rule_applies_base_at_or_below_the_revision_held_and_resyncs_otherwise() {
        let cur = v("a", 10);
        for (what, delta, base, resync, want) in [
            (
                "base equals the revision held",
                v("a", 12),
                Some(10),
                false,
                Rule::Apply(10),
            ),
            (
                "a snapshot between two deltas: base <= r < revision",
                v("a", 12),
                Some(8),
                false,
                Rule::Apply(8),
            ),
            (
                "a missed delta: base past the revision held",
                v("a", 12),
                Some(11),
                false,
                Rule::Resync,
            ),
            ("stale", v("a", 10), Some(9), false, Rule::Skip),
            ("older", v("a", 4), Some(3), false, Rule::Skip),
            ("a resync delta", v("a", 12), Some(10), true, Rule::Resync),
            ("another epoch", v("b", 1), Some(0), false, Rule::Resync),
            (
                "another epoch, a lower revision",
                v("b", 3),
                Some(0),
                false,
                Rule::Resync,
            ),
            ("no base header", v("a", 12), None, false, Rule::Resync),
            (
                "too far ahead",
                v("a", 10 + MAX_REVISION_JUMP + 1),
                Some(10),
                false,
                Rule::Resync,
            ),
            (
                "as far ahead as allowed",
                v("a", 10 + MAX_REVISION_JUMP),
                Some(10),
                false,
                Rule::Apply(10),
            ),
        ] {
            assert_eq!(delta_rule(&cur, 10, &delta, base, resync), want, "{what}");
        }
    }
}
