//! [`Client::watch`]: the live state as a [`Stream`] of [`State`]s.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures_util::Stream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::client::{Client, WatchMode};
use crate::error::Error;
use crate::follow::{Follower, subscribe};
use crate::value::{Flow, FlowId, FlowStateValue, Version};

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
///   order within an epoch, never twice and never backwards, except after a
///   forged update: a snapshot is the worker's word, and one below the
///   revision held replaces what is held when an update at or below that
///   revision, past the last snapshot, showed it was not the worker's; an
///   update more than 2^20 revisions ahead is checked with a snapshot first;
/// - against a v2 worker it follows `<prefix>.state.delta`: it applies a delta
///   whose epoch is the current one and whose base is at or below the current
///   revision (below its own revision), and takes a new chunked snapshot when
///   it cannot (a delta was missed, a new epoch or publisher, a resync delta,
///   a reconnect); against a v1 worker it follows `<prefix>.state`;
/// - a state of a new epoch has [`State::epoch_changed`] set;
/// - a slow consumer gets the newest state, the updates it missed merged into
///   it ([`State::changed`] covers them all); a task moves the updates off the
///   subscription into a queue of at most
///   [`Options::max_pending_bytes`](crate::Options::max_pending_bytes): past
///   it they are dropped, a snapshot is taken, and the first time the stream
///   yields an [`ErrorKind::Limit`](crate::ErrorKind::Limit) error; deltas
///   cannot take the state past [`Options::max_flows`](crate::Options::max_flows);
///   snapshots are at least
///   [`Options::snapshot_interval`](crate::Options::snapshot_interval) apart;
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
pub(crate) struct Pending {
    pub(crate) error: Option<Error>,
    pub(crate) state: Option<PendingState>,
}

/// A state not taken yet: a snapshot (with the deltas after it applied), or
/// the deltas since the state taken last, merged.
pub(crate) enum PendingState {
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
    /// Tokio runtime. It fails only when it cannot subscribe. The updates
    /// are moved out of async-nats as they come by a thread of the watch's
    /// own (`flowstate-watch`), into a queue bounded in bytes
    /// (`max_pending_bytes`): async-nats's channel counts messages, not
    /// bytes, and a task would wait its turn while a burst piles up there.
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
        let follower = Follower::new(
            self.clone(),
            Arc::clone(&pending),
            tx,
            self.nats.statistics().connects.load(Ordering::Relaxed),
        );
        let task = tokio::spawn(follower.run(sub, mode));
        Ok(Watch {
            bell,
            pending,
            task,
            cur: None,
        })
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
