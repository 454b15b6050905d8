//! [`Client`], its [`Options`], and reports: publish and send.

use std::sync::Arc;
use std::time::Duration;

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

// The headers of PROTOCOL.md.
pub(crate) const H_REVISION: &str = "Flow-State-Revision";
pub(crate) const H_EPOCH: &str = "Flow-State-Epoch";
pub(crate) const H_BASE: &str = "Flow-State-Base-Revision";
pub(crate) const H_RESYNC: &str = "Flow-State-Resync";
pub(crate) const H_CHUNKS: &str = "Flow-State-Chunks";
pub(crate) const H_CHUNK: &str = "Flow-State-Chunk";
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
}

impl Default for Options {
    fn default() -> Self {
        Options {
            prefix: DEFAULT_PREFIX.to_string(),
            timeout: DEFAULT_TIMEOUT,
            watch_mode: WatchMode::Auto,
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
    pub(crate) heartbeat_prefix: String, // <prefix>.heartbeat.
    pub(crate) state_subject: String,    // <prefix>.state
    pub(crate) delta_subject: String,    // <prefix>.state.delta
    pub(crate) get_subject: String,      // <prefix>.state.get
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
                heartbeat_prefix: format!("{p}.heartbeat."),
                state_subject: format!("{p}.state"),
                delta_subject: format!("{p}.state.delta"),
                get_subject: format!("{p}.state.get"),
            }),
        })
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

    /// Sends `report` without asking for an acknowledgement. It returns once
    /// the connection has taken the report: it says nothing of whether a
    /// worker received or applied it ([`Client::send`] does).
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
        self.nats
            .publish(subject.clone(), Bytes::from(report.to_msgpack()))
            .await
            .map_err(|e| {
                Error::new(ErrorKind::Nats, "publish failed")
                    .on(&subject)
                    .with_source(e)
            })
    }

    /// Sends `report` as a request and returns once the worker has applied
    /// it, with the version of the state that includes it: a get that
    /// follows sees the report. A report the worker refuses returns an error
    /// with its code and reason: [`ErrorKind::Rejected`] (400, bad input),
    /// [`ErrorKind::Capacity`] (507), [`ErrorKind::Unavailable`] (503); it
    /// changed nothing. Without a worker the kind is
    /// [`ErrorKind::NoWorker`]; past [`Options::timeout`],
    /// [`ErrorKind::TimedOut`] (the report may then still be applied).
    ///
    /// ```no_run
    /// # async fn f(client: flowstate_client::Client) -> Result<(), flowstate_client::Error> {
    /// use flowstate_client::{ErrorKind, FlowStateValue, Report};
    ///
    /// match client.send(&Report::new(1, FlowStateValue::default())).await {
    ///     Ok(v) => println!("applied at revision {} of epoch {}", v.revision, v.epoch),
    ///     Err(e) if e.kind() == ErrorKind::Capacity => eprintln!("worker full: {}", e.reason()),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn send(&self, report: &Report) -> Result<Version, Error> {
        let subject = self.heartbeat_subject(report.node_id);
        let reply = self
            .request(&subject, None, Bytes::from(report.to_msgpack()))
            .await?;
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
        Some(code) => Err(Error::service(
            subject,
            code.trim().parse().unwrap_or(500),
            header(h, H_ERROR).unwrap_or(""),
        )),
    }
}

/// Reads the Flow-State-Epoch and Flow-State-Revision headers.
pub(crate) fn parse_version(h: Option<&HeaderMap>) -> Result<Version, Error> {
    let (Some(epoch), Some(rev)) = (header(h, H_EPOCH), header(h, H_REVISION)) else {
        return Err(Error::new(
            ErrorKind::BadReply,
            format!("missing {H_EPOCH} or {H_REVISION} header"),
        ));
    };
    let revision = rev.trim().parse().map_err(|_| {
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
