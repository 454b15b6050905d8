//! The background task of a [`Watch`](crate::Watch): it follows the
//! worker's updates and decides, per update, whether to apply it or take a
//! snapshot.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::{Message, Subscriber};
use futures_util::{FutureExt, StreamExt};
use tokio::sync::mpsc;

use crate::client::{Client, H_BASE, H_RESYNC, WatchMode, header, parse_version};
use crate::error::{Error, ErrorKind};
use crate::get::{Snapshot, decode_state};
use crate::report::Delta;
use crate::value::{FlowStateValue, Version};
use crate::watch::{Pending, PendingState};

/// Bounds of the pause between retries of a snapshot that failed.
const MIN_RETRY_WAIT: Duration = Duration::from_millis(100);
const MAX_RETRY_WAIT: Duration = Duration::from_secs(5);

/// How often a watch looks whether the connection reconnected (updates
/// published while it was down are lost: a snapshot tells what is current).
const RECONNECT_CHECK: Duration = Duration::from_millis(500);

/// What to do with a delta.
#[derive(Debug, PartialEq, Eq)]
enum Rule {
    /// Stale or a duplicate: it changes nothing.
    Skip,
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
/// goes on with deltas. Another epoch, a resync delta or a base past cur (a
/// delta was missed) means a snapshot.
fn delta_rule(cur: &Version, v: &Version, base: Option<u64>, resync: bool) -> Rule {
    if v.epoch == cur.epoch && v.revision <= cur.revision {
        return Rule::Skip;
    }
    match base {
        Some(base) if !resync && v.epoch == cur.epoch && base <= cur.revision => Rule::Apply(base),
        _ => Rule::Resync,
    }
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
        }
    }

    pub(crate) async fn run(mut self, sub: Subscriber, mode: WatchMode) {
        let snap = self.snapshot().await;
        if mode == WatchMode::V1 {
            self.emit_snapshot(snap);
            return self.follow_full(sub).await;
        }
        if snap.chunks == 0 && mode == WatchMode::Auto {
            // A worker that predates v2 publishes no deltas.
            drop(sub);
            let sub = match subscribe(&self.client, &self.client.inner.state_subject).await {
                Ok(s) => s,
                Err(e) => return self.push_error(e),
            };
            let snap = self.snapshot().await;
            self.emit_snapshot(snap);
            return self.follow_full(sub).await;
        }
        self.emit_snapshot(snap);
        self.follow_deltas(sub).await
    }

    /// Follows <prefix>.state.delta.
    async fn follow_deltas(&mut self, mut sub: Subscriber) {
        let mut tick = tokio::time::interval(RECONNECT_CHECK);
        loop {
            tokio::select! {
                msg = sub.next() => match msg {
                    None => return self.closed(&self.client.inner.delta_subject.clone()),
                    Some(msg) => if !self.apply_delta(&msg) {
                        self.resync().await;
                    },
                },
                _ = tick.tick() => if self.reconnected() {
                    self.resync().await;
                },
            }
        }
    }

    /// Applies a delta if its base allows; false when a snapshot must tell
    /// what is current. A stale or foreign message counts as applied.
    fn apply_delta(&mut self, msg: &Message) -> bool {
        let h = msg.headers.as_ref();
        let Ok(v) = parse_version(h) else {
            return true; // not the worker's
        };
        let cur = self.cur.as_ref().expect("a snapshot comes first");
        let base = header(h, H_BASE).and_then(|b| b.trim().parse::<u64>().ok());
        let base = match delta_rule(cur, &v, base, header(h, H_RESYNC) == Some("1")) {
            Rule::Skip => return true,
            Rule::Resync => return false,
            Rule::Apply(base) => base,
        };
        match Delta::from_msgpack(&msg.payload) {
            Ok(d) if d.base == base => {
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
                true
            }
            _ => false,
        }
    }

    /// Follows <prefix>.state (v1): the newest update that is ready wins.
    async fn follow_full(&mut self, mut sub: Subscriber) {
        let mut tick = tokio::time::interval(RECONNECT_CHECK);
        loop {
            tokio::select! {
                msg = sub.next() => {
                    let Some(mut msg) = msg else {
                        return self.closed(&self.client.inner.state_subject.clone());
                    };
                    let mut mixed = false;
                    while let Some(Some(next)) = sub.next().now_or_never() {
                        let (a, b) = (parse_version(msg.headers.as_ref()), parse_version(next.headers.as_ref()));
                        match (a, b) {
                            (Ok(a), Ok(b)) if a.epoch != b.epoch => { mixed = true; msg = next }
                            (Ok(a), Ok(b)) if b.revision > a.revision => msg = next,
                            (Err(_), Ok(_)) => msg = next,
                            _ => {}
                        }
                    }
                    self.apply_full(&msg, mixed).await;
                },
                _ = tick.tick() => if self.reconnected() {
                    self.resync().await;
                },
            }
        }
    }

    /// Hands over a full update if it is the current epoch's and newer, and
    /// takes a snapshot when it is of another epoch or does not decode.
    async fn apply_full(&mut self, msg: &Message, mixed: bool) {
        let Ok(v) = parse_version(msg.headers.as_ref()) else {
            return;
        };
        let cur = self.cur.clone().expect("a snapshot comes first");
        if !mixed && v.epoch == cur.epoch {
            if v.revision <= cur.revision {
                return;
            }
            if let Ok((version, value)) = decode_state(msg) {
                return self.push_snapshot(version, value);
            }
        }
        self.resync().await;
        // The update may be newer than the snapshot, in the snapshot's epoch.
        let cur = self.cur.clone().expect("set by resync");
        if v.epoch == cur.epoch
            && v.revision > cur.revision
            && let Ok((version, value)) = decode_state(msg)
        {
            self.push_snapshot(version, value);
        }
    }

    /// Takes a snapshot and hands it over if it is news.
    async fn resync(&mut self) {
        let snap = self.snapshot().await;
        self.emit_snapshot(snap);
    }

    /// Gets the current state, handing over the errors and retrying with a
    /// growing pause until it succeeds (the task ends when the watch is
    /// dropped).
    async fn snapshot(&mut self) -> Snapshot {
        let mut wait = MIN_RETRY_WAIT;
        loop {
            match self.client.get().await {
                Ok(s) => return s,
                Err(e) => self.push_error(e),
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(MAX_RETRY_WAIT);
        }
    }

    /// Hands over snapshot s unless it is older than the current state (a
    /// get served by a lagging worker): never backwards.
    fn emit_snapshot(&mut self, s: Snapshot) {
        if let Some(cur) = &self.cur
            && cur.epoch == s.version.epoch
            && s.version.revision <= cur.revision
        {
            return;
        }
        self.push_snapshot(s.version, s.value);
    }

    fn push_snapshot(&mut self, version: Version, value: FlowStateValue) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn v(epoch: &str, revision: u64) -> Version {
        Version {
            epoch: epoch.into(),
            revision,
        }
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
        ] {
            assert_eq!(delta_rule(&cur, &delta, base, resync), want, "{what}");
        }
    }
}
