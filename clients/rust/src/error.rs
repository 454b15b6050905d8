//! [`Error`] and its [`ErrorKind`].

use std::fmt;

/// What went wrong, for the caller to match on. The kinds of a worker's
/// answer carry its `Nats-Service-Error-Code` ([`Error::code`]) and reason
/// ([`Error::reason`]).
///
/// ```
/// use flowstate_client::{Error, ErrorKind};
///
/// fn retry(err: &Error) -> bool {
///     matches!(err.kind(), ErrorKind::Unavailable | ErrorKind::TimedOut | ErrorKind::NoWorker)
/// }
/// # let _ = retry;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// 400: the worker refused the request as bad input (a report that breaks
    /// PROTOCOL.md, a JSON get asking for chunks). Nothing changed; sending
    /// it again will not help.
    Rejected,
    /// 409: the worker refused the report as stale (protocol v3): it holds
    /// a later report of the same flownode process (the same `node_epoch`,
    /// a `seq` at least as great) or a report of a later process of the
    /// node. Nothing changed; sending the report again will not help (a
    /// [`Client`](crate::Client) that numbers reports gives the next one a
    /// greater `seq`). The reason names both reports' `node_epoch` and `seq`.
    Stale,
    /// 413: the aggregate is larger than the connection's max payload, and a
    /// single-message get cannot carry it. [`Client::get`](crate::Client::get)
    /// reads any size in chunks.
    TooLarge,
    /// 503: the worker is not ready, shutting down, or its state store is
    /// unavailable. Nothing was acknowledged; retry after a pause.
    Unavailable,
    /// 507: the report would take the state past the worker's `--max-nodes`
    /// or `--max-total-flows`; the reason names the limit. Nothing changed.
    Capacity,
    /// Another code from the worker (500: an internal error).
    Service,
    /// No worker listens on the subject (NATS "no responders"): the worker is
    /// down, or serves another prefix.
    NoWorker,
    /// No answer within the client's timeout ([`Options::timeout`](crate::Options::timeout)).
    /// A report sent with [`Client::send`](crate::Client::send) may still be applied.
    TimedOut,
    /// The connection dropped and reconnected while a get waited for its
    /// answer (a server restart, or a message the NATS library could not
    /// parse, such as a header that is not UTF-8): the answer is lost, and
    /// the get ends at once instead of at its timeout. Retry.
    Reconnected,
    /// The worker's answer or update breaks PROTOCOL.md (missing headers, an
    /// undecodable body, chunks out of order).
    BadReply,
    /// A reply or the updates a watch keeps went past one of the client's
    /// bounds ([`Options::max_flows`](crate::Options::max_flows),
    /// [`Options::max_get_bytes`](crate::Options::max_get_bytes),
    /// [`Options::max_pending_bytes`](crate::Options::max_pending_bytes));
    /// the reason names it. What went past was dropped.
    Limit,
    /// The NATS connection failed the operation (closed, subject invalid,
    /// payload over the server's max payload).
    Nats,
    /// An option or argument is invalid: nothing was sent.
    InvalidOptions,
}

/// An error of this crate: a kind to match on, the subject it happened on,
/// the worker's code and reason when it answered with one, and a message that
/// says what to do.
///
/// ```
/// use flowstate_client::{Error, ErrorKind};
///
/// # fn check(err: Error) {
/// if err.kind() == ErrorKind::Capacity {
///     eprintln!("worker full ({}): {}", err.code().unwrap(), err.reason());
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    subject: Option<String>,
    code: Option<u16>,
    reason: String,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, reason: impl Into<String>) -> Self {
        Error {
            kind,
            subject: None,
            code: None,
            reason: reason.into(),
            source: None,
        }
    }

    pub(crate) fn on(mut self, subject: &str) -> Self {
        self.subject = Some(subject.to_string());
        self
    }

    pub(crate) fn with_source(
        mut self,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// Prefixes the reason with what, keeping the kind and the source.
    pub(crate) fn prefixed(mut self, what: &str) -> Self {
        self.reason = format!("{what}: {}", self.reason);
        self
    }

    /// The error of a reply with the service error headers.
    pub(crate) fn service(subject: &str, code: u16, reason: &str) -> Self {
        let kind = match code {
            400 => ErrorKind::Rejected,
            409 => ErrorKind::Stale,
            413 => ErrorKind::TooLarge,
            503 => ErrorKind::Unavailable,
            507 => ErrorKind::Capacity,
            _ => ErrorKind::Service,
        };
        Error {
            kind,
            subject: Some(subject.to_string()),
            code: Some(code),
            reason: clean_reason(reason),
            source: None,
        }
    }

    /// Returns the kind of the error.
    ///
    /// ```
    /// # fn f(err: flowstate_client::Error) {
    /// if err.kind() == flowstate_client::ErrorKind::Rejected { /* fix the report */ }
    /// # }
    /// ```
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Returns the worker's `Nats-Service-Error-Code` (400, 409, 413, 500,
    /// 503, 507), `None` when the error did not come from the worker.
    ///
    /// ```
    /// # fn f(err: flowstate_client::Error) {
    /// if err.code() == Some(507) { /* the worker is full */ }
    /// # }
    /// ```
    pub fn code(&self) -> Option<u16> {
        self.code
    }

    /// Returns the worker's `Nats-Service-Error` when it answered with one,
    /// else what went wrong, in a few words.
    ///
    /// ```
    /// # fn f(err: flowstate_client::Error) {
    /// eprintln!("{}", err.reason());
    /// # }
    /// ```
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// Returns the subject of the request or subscription that failed.
    ///
    /// ```
    /// # fn f(err: flowstate_client::Error) {
    /// eprintln!("{:?}", err.subject());
    /// # }
    /// ```
    pub fn subject(&self) -> Option<&str> {
        self.subject.as_deref()
    }

    /// What the caller can do about an error of this kind.
    fn advice(&self) -> &'static str {
        match self.kind {
            ErrorKind::Rejected => {
                "the worker changed nothing; fix the request, sending it again will not help"
            }
            ErrorKind::Stale => {
                "the worker holds a later report of this node's process, or of a later process; this one changed nothing and sending it again will not help"
            }
            ErrorKind::TooLarge => {
                "a single-message get cannot carry the state; use Client::get, which reads any size in chunks"
            }
            ErrorKind::Unavailable => "nothing was applied; retry after a pause",
            ErrorKind::Capacity => {
                "nothing changed; raise the limit the reason names on the worker (--max-nodes / FLOWSTATE_MAX_NODES, --max-total-flows / FLOWSTATE_MAX_TOTAL_FLOWS) or remove nodes"
            }
            ErrorKind::Service => "see the worker's log",
            ErrorKind::NoWorker => {
                "start the worker, or set Options::prefix to the prefix it serves (its --prefix, FLOWSTATE_PREFIX; default \"flow\")"
            }
            ErrorKind::TimedOut => {
                "the worker did not answer in time (Options::timeout); retry, or raise Options::timeout, e.g. Duration::from_secs(10)"
            }
            ErrorKind::Reconnected => {
                "the answer was lost with the connection; retry (only workers may publish on the state subjects and inboxes: see docs/clients.md)"
            }
            ErrorKind::BadReply => {
                "the worker does not speak PROTOCOL.md as this client reads it; check its version"
            }
            ErrorKind::Limit => {
                "what went past was dropped; raise the bound the reason names in Options if the worker's state is that large"
            }
            ErrorKind::Nats => "check the NATS connection",
            ErrorKind::InvalidOptions => "nothing was sent; fix the options or the argument",
        }
    }
}

/// Returns a reason from a reply fit for a log line or a terminal: cut to at
/// most 1,024 bytes at a character boundary (with "..." after it), each
/// control character written as an escape (`\x1b`, `\u0085`), as the Go
/// client does.
pub(crate) fn clean_reason(s: &str) -> String {
    let cut = crate::health::cut_message(s);
    let mut out = String::with_capacity(cut.len());
    for c in cut.chars() {
        match c as u32 {
            n if c.is_control() && n < 0x80 => out.push_str(&format!("\\x{n:02x}")),
            n if c.is_control() => out.push_str(&format!("\\u{n:04x}")),
            _ => out.push(c),
        }
    }
    if cut.len() < s.len() {
        out.push_str("...");
    }
    out
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("flowstate: ")?;
        if let Some(s) = &self.subject {
            write!(f, "{s}: ")?;
        }
        match self.code {
            Some(code) => write!(f, "worker answered {code}: {}", self.reason)?,
            None => f.write_str(&self.reason)?,
        }
        if let Some(src) = &self.source {
            write!(f, " ({src})")?;
        }
        write!(f, "; {}", self.advice())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
