//! [`Client`], its [`Options`], and reports: publish and send.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::{HeaderMap, Message, RequestErrorKind};
use bytes::Bytes;

use crate::error::{Error, ErrorKind};
use crate::report::Report;
use crate::value::Version;

/// The worker's default subject prefix (`--prefix`).
///
/// ```
/// assert_eq!(flowstate_client::Options::default().prefix, flowstate_client::DEFAULT_PREFIX);
/// ```
pub const DEFAULT_PREFIX: &str = "flow";

/// How long a request waits for its answer when [`Options::timeout`] is not
/// set.
///
/// ```
/// assert_eq!(flowstate_client::Options::default().timeout, flowstate_client::DEFAULT_TIMEOUT);
/// ```
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The most flows a get returns and a watch holds when
/// [`Options::max_flows`] is not set: the worker's default
/// `--max-total-flows`.
pub const DEFAULT_MAX_FLOWS: usize = 100_000;

/// The most bytes of one get's reply, its chunks together, when
/// [`Options::max_get_bytes`] is not set: a stats view of
/// [`DEFAULT_MAX_FLOWS`] flows with the worker's default `--max-error-bytes`
/// (16 MiB) of errors fits.
pub const DEFAULT_MAX_GET_BYTES: usize = 64 << 20;

/// The most bytes of updates a watch keeps waiting when
/// [`Options::max_pending_bytes`] is not set: four updates of the server's
/// default max payload (1 MB).
pub const DEFAULT_MAX_PENDING_BYTES: usize = 4 << 20;

/// The least time between two snapshots of a watch when
/// [`Options::snapshot_interval`] is not set: at most two gets a second.
pub const DEFAULT_SNAPSHOT_INTERVAL: Duration = Duration::from_millis(500);

// The headers of PROTOCOL.md.
pub(crate) const H_REVISION: &str = "Flow-State-Revision";
pub(crate) const H_EPOCH: &str = "Flow-State-Epoch";
pub(crate) const H_BASE: &str = "Flow-State-Base-Revision";
pub(crate) const H_RESYNC: &str = "Flow-State-Resync";
pub(crate) const H_CHUNKS: &str = "Flow-State-Chunks";
pub(crate) const H_CHUNK: &str = "Flow-State-Chunk";
pub(crate) const H_VIEW: &str = "Flow-State-View";
pub(crate) const VIEW_STATS: &str = "stats";
pub(crate) const H_CONTENT_TYPE: &str = "Content-Type";
pub(crate) const H_ACCEPT: &str = "Accept";
pub(crate) const H_ERROR: &str = "Nats-Service-Error";
pub(crate) const H_ERROR_CODE: &str = "Nats-Service-Error-Code";
pub(crate) const CONTENT_JSON: &str = "application/json";

/// How [`Client::watch`] follows the state.
///
/// ```
/// use flowstate_client::{Options, WatchMode};
///
/// let opts = Options { watch_mode: WatchMode::V1, ..Options::default() };
/// # let _ = opts;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WatchMode {
    /// Follow `<prefix>.state.delta` when the worker answers a get in chunks
    /// (it speaks v2), `<prefix>.state` otherwise. A v2 worker run with
    /// `--state-updates full` publishes no deltas: watch it with
    /// [`WatchMode::V1`].
    #[default]
    Auto,
    /// Follow the full updates on `<prefix>.state`.
    V1,
    /// Follow the delta updates on `<prefix>.state.delta`.
    V2,
}

/// The options of a [`Client`]; [`Options::default`] takes the worker's
/// defaults.
///
/// ```
/// use std::time::Duration;
/// use flowstate_client::Options;
///
/// let opts = Options { prefix: "prod.flow".into(), timeout: Duration::from_secs(2), ..Options::default() };
/// # let _ = opts;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The worker's subject prefix (its `--prefix`, `FLOWSTATE_PREFIX`):
    /// one or more dot-separated tokens without spaces or wildcards.
    pub prefix: String,
    /// Bounds every request: an acknowledged report, a get (all its chunks),
    /// each snapshot of a watch. Must be more than zero.
    pub timeout: Duration,
    /// How [`Client::watch`] follows the state.
    pub watch_mode: WatchMode,
    /// Turns off the numbering of reports: [`Client::send`] and
    /// [`Client::publish`] then send each [`Report`] exactly as given, with
    /// `node_epoch` and `seq` only where it sets them, and the worker
    /// applies reports without both in arrival order, as in protocol v2. By
    /// default (`false`) the client numbers every report it sends (see
    /// [`Client::send`]), so that a report delayed in the network never
    /// replaces a later one.
    pub unnumbered: bool,
    /// The most flows a get returns and a watch holds. A get whose reply
    /// names more fails with [`ErrorKind::Limit`]; a watch whose updates take
    /// it past drops them and takes a snapshot. Must be more than zero.
    pub max_flows: usize,
    /// The most bytes of one get's reply, its chunks together; past it the
    /// get fails with [`ErrorKind::Limit`]. Must be more than zero.
    pub max_get_bytes: usize,
    /// The most bytes of updates a watch keeps waiting while a snapshot is
    /// taken or the consumer is busy: past it the watch drops them all, takes
    /// a snapshot, and says so once with an [`ErrorKind::Limit`] error. Must
    /// be more than zero.
    pub max_pending_bytes: usize,
    /// The least time between two snapshots of one watch, so that a storm of
    /// updates that call for snapshots costs the worker a bounded number of
    /// gets.
    pub snapshot_interval: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            prefix: DEFAULT_PREFIX.to_string(),
            timeout: DEFAULT_TIMEOUT,
            watch_mode: WatchMode::Auto,
            unnumbered: false,
            max_flows: DEFAULT_MAX_FLOWS,
            max_get_bytes: DEFAULT_MAX_GET_BYTES,
            max_pending_bytes: DEFAULT_MAX_PENDING_BYTES,
            snapshot_interval: DEFAULT_SNAPSHOT_INTERVAL,
        }
    }
}

impl Options {
    /// Reports the first invalid option.
    ///
    /// ```
    /// use flowstate_client::Options;
    ///
    /// assert!(Options { prefix: "flow.*".into(), ..Options::default() }.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |why: &str| {
            Error::new(
                ErrorKind::InvalidOptions,
                format!(
                    "prefix {:?} {why}; give the worker's --prefix, e.g. \"flow\"",
                    self.prefix
                ),
            )
        };
        if self.prefix.is_empty() {
            return Err(bad("is empty"));
        }
        for token in self.prefix.split('.') {
            if token.is_empty() {
                return Err(bad("has an empty token"));
            }
            if token == "*" || token == ">" || token.contains(char::is_whitespace) {
                return Err(bad("has a wildcard or whitespace"));
            }
        }
        if self.max_flows == 0 || self.max_get_bytes == 0 || self.max_pending_bytes == 0 {
            return Err(Error::new(
                ErrorKind::InvalidOptions,
                "max_flows, max_get_bytes and max_pending_bytes must be more than zero; leave them at Options::default()'s",
            ));
        }
        if self.timeout.is_zero() {
            return Err(Error::new(
                ErrorKind::InvalidOptions,
                "timeout is zero; set Options::timeout, e.g. Duration::from_secs(5)",
            ));
        }
        Ok(())
    }
}

/// A client of the flow state worker serving one subject prefix: a flownode
/// sends its reports with it, a frontend reads and follows the state.
///
/// It is cheap to clone (clones share the NATS connection) and safe to use
/// from many tasks. The connection is the caller's: the client never dials
/// and never closes it.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use flowstate_client::{Client, FlowStateValue, Options, Report};
///
/// let nats = async_nats::connect("nats://127.0.0.1:4222").await?;
/// let client = Client::new(nats, Options::default())?;
/// let version = client.send(&Report::new(1, FlowStateValue::default())).await?;
/// let snapshot = client.get().await?;
/// assert!(snapshot.version.revision >= version.revision);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Client {
    pub(crate) nats: async_nats::Client,
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) timeout: Duration,
    pub(crate) watch_mode: WatchMode,
    pub(crate) max_flows: usize,
    pub(crate) max_get_bytes: usize,
    pub(crate) max_pending_bytes: usize,
    pub(crate) snapshot_interval: Duration,
    pub(crate) heartbeat_prefix: String, // <prefix>.heartbeat.
    pub(crate) state_subject: String,    // <prefix>.state
    pub(crate) delta_subject: String,    // <prefix>.state.delta
    pub(crate) get_subject: String,      // <prefix>.state.get
    /// How the client numbers reports; None when unnumbered.
    pub(crate) numbering: Option<Numbering>,
    /// Whether the client has logged a repair of an error list: it logs
    /// the first only.
    pub(crate) repair_logged: AtomicBool,
}

/// The numbering of a client's reports: its node_epoch, and the seq it gave
/// last.
#[derive(Debug)]
pub(crate) struct Numbering {
    epoch: u64,
    seq: AtomicU64,
}

/// The node_epoch of the client of this process created last.
static LAST_EPOCH: AtomicU64 = AtomicU64::new(0);

impl Numbering {
    /// Returns the numbering of a new client: its node_epoch is the time now
    /// in unix ms, or one more than the previous client's when that is not
    /// earlier, so that no two clients of one process share a node_epoch
    /// (each counts its seq from 1).
    fn new() -> Self {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let mut epoch = now.max(1);
        let _ = LAST_EPOCH.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
            epoch = now.max(1).max(last.saturating_add(1));
            Some(epoch)
        });
        Numbering {
            epoch,
            seq: AtomicU64::new(0),
        }
    }

    /// Returns the node_epoch and seq to send report r with: r's own where
    /// set, else the client's node_epoch and its next seq. A seq r sets in
    /// the client's node_epoch raises the client's count to it, so that the
    /// seqs it gives next stay above it (at u64::MAX, the count stays there:
    /// the worker refuses the client's next reports as stale).
    fn number(&self, r: &Report) -> (Option<u64>, Option<u64>) {
        let epoch = r.node_epoch.unwrap_or(self.epoch);
        let seq = match r.seq {
            None => {
                let next = |s: u64| Some(s.saturating_add(1));
                let prev = self
                    .seq
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, next);
                prev.map_or(u64::MAX, |s| s.saturating_add(1))
            }
            Some(seq) => {
                if epoch == self.epoch {
                    self.seq.fetch_max(seq, Ordering::Relaxed);
                }
                seq
            }
        };
        (Some(epoch), Some(seq))
    }
}

impl Client {
    /// Returns a client that talks over `nats`. It does no I/O.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let nats = async_nats::connect("nats://127.0.0.1:4222").await?;
    /// let client = flowstate_client::Client::new(nats, Default::default())?;
    /// # let _ = client;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(nats: async_nats::Client, options: Options) -> Result<Self, Error> {
        options.validate()?;
        let p = &options.prefix;
        Ok(Client {
            nats,
            inner: Arc::new(Inner {
                timeout: options.timeout,
                watch_mode: options.watch_mode,
                max_flows: options.max_flows,
                max_get_bytes: options.max_get_bytes,
                max_pending_bytes: options.max_pending_bytes,
                snapshot_interval: options.snapshot_interval,
                heartbeat_prefix: format!("{p}.heartbeat."),
                state_subject: format!("{p}.state"),
                delta_subject: format!("{p}.state.delta"),
                get_subject: format!("{p}.state.get"),
                numbering: (!options.unnumbered).then(Numbering::new),
                repair_logged: AtomicBool::new(false),
            }),
        })
    }

    /// Returns the `node_epoch` the client gives the reports it numbers (its
    /// creation time in unix ms, unique in the process), `None` with
    /// [`Options::unnumbered`]. Clones of a client share it, and its `seq`.
    ///
    /// ```no_run
    /// # fn f(client: flowstate_client::Client) {
    /// println!("reports go out as process {:?}", client.node_epoch());
    /// # }
    /// ```
    pub fn node_epoch(&self) -> Option<u64> {
        self.inner.numbering.as_ref().map(|n| n.epoch)
    }

    /// Returns the body of report r as the client sends it: its error lists
    /// repaired (the first repair logged, once), numbered unless the client
    /// is unnumbered.
    fn body(&self, r: &Report) -> Result<Bytes, Error> {
        if let Some(flow) = r.repaired_flow()
            && !self.inner.repair_logged.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                node = r.node_id,
                flow,
                "flowstate client: repaired the error list of a report, which the worker would refuse whole (an empty message dropped, more than 3 errors cut to the newest 3, or a message cut to 1,024 bytes); later repairs are not logged"
            );
        }
        let body = match &self.inner.numbering {
            None => r.to_msgpack(),
            Some(n) => {
                let (epoch, seq) = n.number(r);
                r.encode(epoch, seq)
            }
        };
        Ok(Bytes::from(body))
    }

    /// Returns the NATS connection the client talks over.
    ///
    /// ```no_run
    /// # fn f(client: flowstate_client::Client) {
    /// let info = client.nats().server_info();
    /// println!("max payload {}", info.max_payload);
    /// # }
    /// ```
    pub fn nats(&self) -> &async_nats::Client {
        &self.nats
    }

    /// Returns the subject node `node_id` reports on:
    /// `<prefix>.heartbeat.<node_id>`.
    ///
    /// ```no_run
    /// # fn f(client: flowstate_client::Client) {
    /// assert_eq!(client.heartbeat_subject(7), "flow.heartbeat.7");
    /// # }
    /// ```
    pub fn heartbeat_subject(&self, node_id: u64) -> String {
        format!("{}{node_id}", self.inner.heartbeat_prefix)
    }

    /// Sends `report`, numbered as [`Client::send`] says, without asking for
    /// an acknowledgement. It returns once the connection has taken the
    /// report: it says nothing of whether a worker received or applied it
    /// ([`Client::send`] does); a worker drops a report it refuses (a stale
    /// one included). Error lists the worker would refuse are repaired
    /// ([`repair_errors`](crate::repair_errors)) rather than have the whole
    /// report refused.
    ///
    /// ```no_run
    /// # async fn f(client: flowstate_client::Client) -> Result<(), flowstate_client::Error> {
    /// use flowstate_client::{FlowStateValue, Report};
    ///
    /// client.publish(&Report::new(1, FlowStateValue::default())).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn publish(&self, report: &Report) -> Result<(), Error> {
        let subject = self.heartbeat_subject(report.node_id);
        let body = self.body(report).map_err(|e| e.on(&subject))?;
        self.nats.publish(subject.clone(), body).await.map_err(|e| {
            Error::new(ErrorKind::Nats, "publish failed")
                .on(&subject)
                .with_source(e)
        })
    }

    /// Sends `report` as a request and returns once the worker has applied
    /// it, with the version of the state that includes it: a get that
    /// follows sees the report. A report the worker refuses returns an error
    /// with its code and reason: [`ErrorKind::Rejected`] (400, bad input),
    /// [`ErrorKind::Stale`] (409), [`ErrorKind::Capacity`] (507),
    /// [`ErrorKind::Unavailable`] (503); it changed nothing. Without a worker
    /// the kind is [`ErrorKind::NoWorker`]; past [`Options::timeout`],
    /// [`ErrorKind::TimedOut`] (the report may then still be applied).
    /// Error lists the worker would refuse (an empty message, more than 3
    /// errors, a long message) are sent repaired
    /// ([`repair_errors`](crate::repair_errors)), so that the node's state
    /// sizes get through; the client logs its first repair once, through
    /// `tracing`.
    ///
    /// Unless [`Options::unnumbered`], the client numbers the report
    /// (protocol v3): a report without `node_epoch` is sent with the
    /// client's ([`Client::node_epoch`]), one without `seq` with the
    /// client's next, strictly greater than every seq it gave before,
    /// whatever the node. The worker then refuses as stale (409) a report
    /// not newer than the one it holds for the node from the same client,
    /// and one of a client the node's reports have moved away from: a report
    /// delayed in the network never replaces a later one, with no code on
    /// the caller's side. Use one client (or its clones) for all the reports
    /// of a node, and send them one after the other: of two sent at once for
    /// one node, the one that arrives second may be the older and be
    /// refused. A send that timed out can be sent again as is: the retry
    /// gets a new seq. A `node_epoch` or `seq` the report sets is sent as
    /// given, and a seq set in the client's `node_epoch` raises the client's
    /// count to it, so that the seqs it gives next stay above it.
    ///
    /// ```no_run
    /// # async fn f(client: flowstate_client::Client) -> Result<(), flowstate_client::Error> {
    /// use flowstate_client::{ErrorKind, FlowStateValue, Report};
    ///
    /// match client.send(&Report::new(1, FlowStateValue::default())).await {
    ///     Ok(v) => println!("applied at revision {} of epoch {}", v.revision, v.epoch),
    ///     Err(e) if e.kind() == ErrorKind::Capacity => eprintln!("worker full: {}", e.reason()),
    ///     Err(e) if e.kind() == ErrorKind::Stale => eprintln!("a later report is applied: {}", e.reason()),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn send(&self, report: &Report) -> Result<Version, Error> {
        let subject = self.heartbeat_subject(report.node_id);
        let body = self.body(report).map_err(|e| e.on(&subject))?;
        let reply = self.request(&subject, None, body).await?;
        parse_version(reply.headers.as_ref()).map_err(|e| e.on(&subject))
    }

    /// Sends a request bounded by the client's timeout and returns the
    /// reply, or the worker's service error.
    pub(crate) async fn request(
        &self,
        subject: &str,
        headers: Option<HeaderMap>,
        payload: Bytes,
    ) -> Result<Message, Error> {
        let mut req = async_nats::Request::new()
            .payload(payload)
            .timeout(Some(self.inner.timeout));
        if let Some(h) = headers {
            req = req.headers(h);
        }
        let reply = self
            .nats
            .send_request(subject.to_string(), req)
            .await
            .map_err(|e| {
                let err = match e.kind() {
                    RequestErrorKind::NoResponders => {
                        Error::new(ErrorKind::NoWorker, "no worker answered")
                    }
                    RequestErrorKind::TimedOut => Error::new(
                        ErrorKind::TimedOut,
                        format!("no answer within {:?}", self.inner.timeout),
                    ),
                    _ => Error::new(ErrorKind::Nats, "request failed"),
                };
                err.on(subject).with_source(e)
            })?;
        check_service_error(subject, &reply)?;
        Ok(reply)
    }
}

/// Returns the header's value, if any.
pub(crate) fn header<'a>(h: Option<&'a HeaderMap>, name: &str) -> Option<&'a str> {
    h.and_then(|h| h.get(name)).map(|v| v.as_str())
}

/// Returns the worker's error when msg carries the service error headers.
pub(crate) fn check_service_error(subject: &str, msg: &Message) -> Result<(), Error> {
    let h = msg.headers.as_ref();
    match header(h, H_ERROR_CODE) {
        None => Ok(()),
        // A code that is not three digits, 100 to 999, is 500: anything else.
        Some(code) => Err(Error::service(
            subject,
            crate::get::canonical_uint::<u16>(code.trim())
                .filter(|c| (100..=999).contains(c))
                .unwrap_or(500),
            header(h, H_ERROR).unwrap_or(""),
        )),
    }
}

/// The longest epoch PROTOCOL.md allows.
const MAX_EPOCH_LEN: usize = 64;

/// Whether e may name a state's lineage: 1 to 64 printable ASCII
/// characters (`!` to `~`).
fn valid_epoch(e: &str) -> bool {
    (1..=MAX_EPOCH_LEN).contains(&e.len()) && e.bytes().all(|b| (b'!'..=b'~').contains(&b))
}

/// Reads the Flow-State-Epoch (1 to 64 printable ASCII characters) and
/// Flow-State-Revision (a decimal uint64 without sign or leading zero)
/// headers; anything else is a malformed reply.
pub(crate) fn parse_version(h: Option<&HeaderMap>) -> Result<Version, Error> {
    let (Some(epoch), Some(rev)) = (header(h, H_EPOCH), header(h, H_REVISION)) else {
        return Err(Error::new(
            ErrorKind::BadReply,
            format!("missing {H_EPOCH} or {H_REVISION} header"),
        ));
    };
    if !valid_epoch(epoch) {
        return Err(Error::new(
            ErrorKind::BadReply,
            format!(
                "{H_EPOCH} {epoch:.80?} is not 1 to {MAX_EPOCH_LEN} printable ASCII characters"
            ),
        ));
    }
    let revision = crate::get::canonical_uint(rev.trim()).ok_or_else(|| {
        Error::new(
            ErrorKind::BadReply,
            format!("{H_REVISION} {rev:?} is not a decimal uint64"),
        )
    })?;
    Ok(Version {
        epoch: epoch.to_string(),
        revision,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::FlowStateValue;

    fn report() -> Report {
        Report::new(1, FlowStateValue::default())
    }

    #[test]
    fn numbering_gives_its_epoch_and_a_growing_seq_and_keeps_what_the_report_sets() {
        let n = Numbering::new();
        assert_eq!(n.number(&report()), (Some(n.epoch), Some(1)));
        assert_eq!(n.number(&report()), (Some(n.epoch), Some(2)));
        // Another node's report takes the next seq of the same count.
        assert_eq!(
            n.number(&Report::new(2, FlowStateValue::default())).1,
            Some(3)
        );
        // A node_epoch of the caller's is kept, the seq is the client's.
        assert_eq!(n.number(&report().with_node_epoch(5)), (Some(5), Some(4)));
        // A seq of the caller's in another epoch leaves the count alone.
        assert_eq!(
            n.number(&report().with_node_epoch(5).with_seq(100)),
            (Some(5), Some(100))
        );
        assert_eq!(n.number(&report()).1, Some(5));
        // A seq of the caller's in the client's epoch raises the count to it.
        assert_eq!(n.number(&report().with_seq(50)), (Some(n.epoch), Some(50)));
        assert_eq!(n.number(&report()).1, Some(51));
        // A lower one does not lower it.
        assert_eq!(n.number(&report().with_seq(7)).1, Some(7));
        assert_eq!(n.number(&report()).1, Some(52));
        // The count ends at u64::MAX, without overflowing.
        assert_eq!(n.number(&report().with_seq(u64::MAX)).1, Some(u64::MAX));
        assert_eq!(n.number(&report()).1, Some(u64::MAX));
    }

    #[test]
    fn clients_of_one_process_never_share_a_node_epoch() {
        let epochs: Vec<u64> = (0..100).map(|_| Numbering::new().epoch).collect();
        assert!(epochs.windows(2).all(|w| w[0] < w[1]), "{epochs:?}");
        assert!(epochs[0] >= 1_600_000_000_000, "unix ms: {}", epochs[0]);
    }
}
