//! [`Client::watch`]: the live state as a [`Stream`] of [`State`]s.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use async_nats::{Message, Subscriber};
use futures_util::{FutureExt, Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::client::{Client, H_BASE, H_RESYNC, WatchMode, header, parse_version};
use crate::error::{Error, ErrorKind};
use crate::get::{Snapshot, decode_state};
use crate::report::Delta;
use crate::value::{Flow, FlowId, FlowStateValue, Version};

/// Bounds of the pause between retries of a snapshot that failed.
const MIN_RETRY_WAIT: Duration = Duration::from_millis(100);
const MAX_RETRY_WAIT: Duration = Duration::from_secs(5);

/// How often a watch looks whether the connection reconnected (updates
/// published while it was down are lost: a snapshot tells what is current).
const RECONNECT_CHECK: Duration = Duration::from_millis(500);

/// The aggregate at one version, as [`Watch`] yields it.
///
/// ```no_run
/// # async fn f(client: flowstate_client::Client) -> Result<(), flowstate_client::Error> {
/// use futures_util::StreamExt;
///
/// let mut watch = client.watch().await?;
/// while let Some(state) = watch.next().await {
///     let state = state?;
///     for flow in &state.changed {
///         println!("{} flow {}: {:?}", state.version, flow.id, flow.last_exec_time);
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// The state's epoch and revision.
    pub version: Version,
    /// The aggregate. It is shared with the watch, which applies the next
    /// updates to it in place when no clone of it is held: drop a state (or
    /// its value) before the next one arrives to save a copy.
    pub value: Arc<FlowStateValue>,
    /// Set on the first state of a new epoch: the state started over (the
    /// worker restarted with an empty store, or the store was cleared), so
    /// revisions start over too and flows the caller knew may be gone. False
    /// on the first state a watch yields.
    pub epoch_changed: bool,
    /// The flows whose entry differs from the state yielded before (every
    /// flow of the first one), sorted by id, each with its entry now; a flow
    /// that [`Flow::is_gone`] left. After delta updates it may list a flow
    /// whose entry a report set to the value it had.
    pub changed: Vec<Flow>,
}

/// The live aggregate, a [`Stream`] of [`State`]s returned by
/// [`Client::watch`]:
///
/// - the first state is a snapshot, then come the updates, in revision
///   order within an epoch, never twice and never backwards;
/// - against a v2 worker it follows `<prefix>.state.delta`: it applies a delta
///   whose epoch is the current one and whose base is at or below the current
///   revision (below its own revision), and takes a new chunked snapshot when
///   it cannot (a delta was missed, a new epoch or publisher, a resync delta,
///   a reconnect); against a v1 worker it follows `<prefix>.state`;
/// - a state of a new epoch has [`State::epoch_changed`] set;
/// - a slow consumer gets the newest state, the updates it missed merged into
///   it ([`State::changed`] covers them all): memory stays bounded by the
///   state, whatever the rate of updates;
/// - a snapshot that fails yields the error (the stream goes on, and retries
///   after a pause that grows to 5 s); the stream ends, after an error, when
///   the connection closes.
///
/// Dropping it unsubscribes and stops its background task.
pub struct Watch {
    bell: mpsc::Receiver<()>,
    pending: Arc<Mutex<Pending>>,
    task: JoinHandle<()>,
    cur: Option<(Version, Arc<FlowStateValue>)>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("version", &self.cur.as_ref().map(|c| &c.0))
            .finish()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the follower task has for the consumer that it has not taken yet.
#[derive(Default)]
struct Pending {
    error: Option<Error>,
    state: Option<PendingState>,
}

enum PendingState {
    Snapshot {
        version: Version,
        value: FlowStateValue,
    },
    Deltas {
        version: Version,
        changes: BTreeMap<FlowId, Flow>,
    },
}

impl Stream for Watch {
    type Item = Result<State, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(item) = self.take_pending() {
                return Poll::Ready(Some(item));
            }
            match self.bell.poll_recv(cx) {
                Poll::Ready(Some(())) => continue,
                Poll::Ready(None) => return Poll::Ready(self.take_pending()),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl Watch {
    /// Takes what is pending and makes it the next item.
    fn take_pending(&mut self) -> Option<Result<State, Error>> {
        let (error, state) = {
            let mut p = self.pending.lock().expect("watch lock");
            match p.error.take() {
                Some(e) => (Some(e), None),
                None => (None, p.state.take()),
            }
        };
        if let Some(e) = error {
            return Some(Err(e));
        }
        let (version, epoch_changed, changed) = match state? {
            PendingState::Snapshot { version, value } => {
                let (epoch_changed, changed) = match &self.cur {
                    Some((v, old)) => (v.epoch != version.epoch, changed_flows(old, &value)),
                    None => (false, value.flows()),
                };
                self.cur = Some((version.clone(), Arc::new(value)));
                (version, epoch_changed, changed)
            }
            PendingState::Deltas { version, changes } => {
                let (v, value) = self.cur.as_mut().expect("a snapshot comes first");
                Arc::make_mut(value).apply(changes.values());
                *v = version.clone();
                (version, false, changes.into_values().collect())
            }
        };
        let value = Arc::clone(&self.cur.as_ref().expect("set above").1);
        Some(Ok(State {
            version,
            value,
            epoch_changed,
            changed,
        }))
    }
}

/// Returns the flows of new whose entry differs from old, and a gone flow for
/// each flow of old that new lacks, sorted by id.
fn changed_flows(old: &FlowStateValue, new: &FlowStateValue) -> Vec<Flow> {
    let (a, b) = (old.flows(), new.flows());
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() || j < b.len() {
        if j == b.len() || (i < a.len() && a[i].id < b[j].id) {
            out.push(Flow::gone(a[i].id));
            i += 1;
        } else if i == a.len() || b[j].id < a[i].id {
            out.push(b[j]);
            j += 1;
        } else {
            if a[i] != b[j] {
                out.push(b[j]);
            }
            i += 1;
            j += 1;
        }
    }
    out
}

impl Client {
    /// Follows the live aggregate: subscribes to the updates, then takes a
    /// snapshot in a background task, and returns the [`Watch`] stream of
    /// states (see there for its guarantees). It must be called within a
    /// Tokio runtime. It fails only when it cannot subscribe.
    ///
    /// ```no_run
    /// # async fn f(client: flowstate_client::Client) -> Result<(), flowstate_client::Error> {
    /// use futures_util::StreamExt;
    ///
    /// let mut watch = client.watch().await?;
    /// while let Some(state) = watch.next().await {
    ///     match state {
    ///         Ok(s) => println!("{}: {} flows changed", s.version, s.changed.len()),
    ///         Err(e) => eprintln!("{e}"), // the watch retries
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn watch(&self) -> Result<Watch, Error> {
        let mode = self.inner.watch_mode;
        let subject = match mode {
            WatchMode::V1 => &self.inner.state_subject,
            _ => &self.inner.delta_subject,
        };
        let sub = subscribe(self, subject).await?;
        let (tx, bell) = mpsc::channel(1);
        let pending = Arc::new(Mutex::new(Pending::default()));
        let follower = Follower {
            client: self.clone(),
            pending: Arc::clone(&pending),
            bell: tx,
            cur: None,
            connects: self.nats.statistics().connects.load(Ordering::Relaxed),
        };
        let task = tokio::spawn(follower.run(sub, mode));
        Ok(Watch {
            bell,
            pending,
            task,
            cur: None,
        })
    }
}

async fn subscribe(client: &Client, subject: &str) -> Result<Subscriber, Error> {
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
struct Follower {
    client: Client,
    pending: Arc<Mutex<Pending>>,
    bell: mpsc::Sender<()>,
    cur: Option<Version>, // the version handed over last
    connects: u64,        // the connection's connects, as last seen
}

impl Follower {
    async fn run(mut self, sub: Subscriber, mode: WatchMode) {
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
        if v.epoch == cur.epoch && v.revision <= cur.revision {
            return true; // stale or a duplicate
        }
        // A delta lists every flow changed since base with its entry now,
        // so it brings any revision from base on to its own.
        let base = header(h, H_BASE).and_then(|b| b.trim().parse::<u64>().ok());
        let Some(base) = base else { return false };
        if header(h, H_RESYNC) == Some("1") || v.epoch != cur.epoch || base > cur.revision {
            return false;
        }
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

    #[test]
    fn changed_flows_lists_new_changed_and_gone_flows() {
        let old = FlowStateValue::new(
            [(1, 1), (2, 2), (3, 3)].into(),
            Default::default(),
            Default::default(),
        );
        let new = FlowStateValue::new(
            [(2, 2), (3, 4), (5, 5)].into(),
            Default::default(),
            Default::default(),
        );
        let got = changed_flows(&old, &new);
        let ids: Vec<_> = got.iter().map(|f| (f.id, f.state_size)).collect();
        assert_eq!(ids, vec![(1, None), (3, Some(4)), (5, Some(5))]);
    }
}
