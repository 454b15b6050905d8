//! The heartbeat [`Report`] and the [`Delta`] body.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize, Serializer};

use crate::error::{Error, ErrorKind};
use crate::health::{FlowError, MAX_FLOW_ERRORS, cut_message};
use crate::value::{Flow, FlowId, FlowMap, FlowStateValue, decode_msgpack};

/// A flownode's heartbeat report (PROTOCOL.md, Heartbeat report). It replaces
/// the node's previous report whole: an empty value removes all of the
/// node's flows from the aggregate.
///
/// Its v3 fields carry each flow's health (`processed_rows`, `last_errors`)
/// and the report's number within its process (`seq`, with `node_epoch`).
/// A [`Client`](crate::Client) numbers the reports it sends unless told not
/// to ([`Options::unnumbered`](crate::Options::unnumbered)): a report without
/// `node_epoch` gets the client's ([`Client::node_epoch`](crate::Client::node_epoch)),
/// one without `seq` the client's next, so that a report delayed in the
/// network never replaces a later one (the worker answers it 409,
/// [`ErrorKind::Stale`](crate::ErrorKind::Stale)). Values set here are sent
/// as given.
///
/// ```
/// use std::collections::BTreeMap;
/// use flowstate_client::{FlowError, Report};
///
/// // The maps a GreptimeDB flownode keeps in its FlowStat.
/// let state_size: BTreeMap<u32, usize> = BTreeMap::from([(1, 1024)]);
/// let last_exec_time_map: BTreeMap<u32, i64> = BTreeMap::from([(1, 1_700_000_000_000)]);
/// let start_time_map: BTreeMap<u32, i64> = BTreeMap::new();
/// let report = Report::new(7, (state_size, last_exec_time_map, start_time_map))
///     .with_processed_rows(BTreeMap::from([(1, 52_000)]))
///     .with_last_errors(BTreeMap::from([(1, vec![FlowError::new(1_700_000_000_000, "sink table missing")])]));
/// assert_eq!(report.node_id, 7);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Report {
    /// The flownode's configured id (GreptimeDB: `header.member_id`).
    pub node_id: u64,
    /// The flownode's process: its start time, unix ms. `None` leaves it out
    /// of the report, or, when a [`Client`](crate::Client) numbers the
    /// report, sends the client's.
    pub node_epoch: Option<u64>,
    /// The node's flows.
    pub value: FlowStateValue,
    /// For each flow, the rows it processed on this node since the node's
    /// process started (v3). `None` leaves the field out.
    pub processed_rows: Option<BTreeMap<FlowId, u64>>,
    /// For each flow, its most recent errors on this node, newest first, at
    /// most [`MAX_FLOW_ERRORS`], each message not empty (v3); an empty list
    /// means none. The list is repaired when the report is encoded
    /// ([`repair_errors`](crate::repair_errors): empty messages dropped, the
    /// newest 3 kept, a message longer than
    /// [`MAX_ERROR_MESSAGE`](crate::MAX_ERROR_MESSAGE) bytes cut at a
    /// character boundary). `None` leaves the field out.
    pub last_errors: Option<BTreeMap<FlowId, Vec<FlowError>>>,
    /// The report's number within its process (v3): strictly greater than
    /// that of every earlier report of the same `node_epoch`. `None` leaves
    /// it out, or, when a [`Client`](crate::Client) numbers the report,
    /// sends the client's next.
    pub seq: Option<u64>,
}

/// The report on the wire: field names as strings, optional fields only
/// when set, messages cut.
#[derive(Serialize)]
struct WireReport<'a> {
    node_id: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    node_epoch: Option<u64>,
    state_size: &'a BTreeMap<FlowId, usize>,
    last_exec_time_map: &'a BTreeMap<FlowId, i64>,
    start_time_map: &'a BTreeMap<FlowId, i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    processed_rows: Option<&'a BTreeMap<FlowId, u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_errors: Option<WireLastErrors<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seq: Option<u64>,
}

/// `last_errors` on the wire, each flow's list repaired as
/// [`repair_errors`](crate::repair_errors) does.
struct WireLastErrors<'a>(&'a BTreeMap<FlowId, Vec<FlowError>>);

struct WireErrors<'a>(&'a [FlowError]);

#[derive(Serialize)]
struct WireError<'a> {
    time: i64,
    message: &'a str,
}

impl Serialize for WireLastErrors<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(id, errs)| (id, WireErrors(errs))))
    }
}

impl Serialize for WireErrors<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // As repair_errors: what the worker takes.
        let kept: Vec<WireError<'_>> = self
            .0
            .iter()
            .filter(|e| !e.message.is_empty())
            .take(MAX_FLOW_ERRORS)
            .map(|e| WireError {
                time: e.time,
                message: cut_message(&e.message),
            })
            .collect();
        s.collect_seq(kept)
    }
}

impl Report {
    /// Returns whether encoding the report repairs one of its error lists
    /// ([`repair_errors`](crate::repair_errors)), and which flow's first.
    pub(crate) fn repaired_flow(&self) -> Option<FlowId> {
        self.last_errors
            .iter()
            .flatten()
            .find(|(_, errs)| crate::health::repair_errors(errs).is_some())
            .map(|(id, _)| *id)
    }

    /// Returns node `node_id`'s report of `value`: a [`FlowStateValue`], or
    /// the three maps of a GreptimeDB flownode as a tuple.
    ///
    /// ```
    /// use flowstate_client::{FlowStateValue, Report};
    ///
    /// let empty = Report::new(3, FlowStateValue::default());
    /// assert!(empty.value.is_empty());
    /// ```
    pub fn new(node_id: u64, value: impl Into<FlowStateValue>) -> Self {
        Report {
            node_id,
            value: value.into(),
            ..Report::default()
        }
    }

    /// Sets the flownode's process, its start time in unix ms. A
    /// [`Client`](crate::Client) that numbers reports gives its own when
    /// none is set.
    ///
    /// ```
    /// use flowstate_client::{FlowStateValue, Report};
    ///
    /// let r = Report::new(3, FlowStateValue::default()).with_node_epoch(1_700_000_000_000);
    /// assert_eq!(r.node_epoch, Some(1_700_000_000_000));
    /// ```
    pub fn with_node_epoch(mut self, unix_ms: u64) -> Self {
        self.node_epoch = Some(unix_ms);
        self
    }

    /// Sets the rows each flow processed on this node since its process
    /// started.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use flowstate_client::{FlowStateValue, Report};
    ///
    /// let r = Report::new(3, FlowStateValue::default()).with_processed_rows(BTreeMap::from([(1, 10)]));
    /// assert_eq!(r.processed_rows.unwrap()[&1], 10);
    /// ```
    pub fn with_processed_rows(mut self, rows: BTreeMap<FlowId, u64>) -> Self {
        self.processed_rows = Some(rows);
        self
    }

    /// Sets each flow's most recent errors, newest first, at most
    /// [`MAX_FLOW_ERRORS`] a flow.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use flowstate_client::{FlowError, FlowStateValue, Report};
    ///
    /// let r = Report::new(3, FlowStateValue::default())
    ///     .with_last_errors(BTreeMap::from([(1, vec![FlowError::new(5, "timeout")])]));
    /// assert_eq!(r.last_errors.unwrap()[&1].len(), 1);
    /// ```
    pub fn with_last_errors(mut self, errors: BTreeMap<FlowId, Vec<FlowError>>) -> Self {
        self.last_errors = Some(errors);
        self
    }

    /// Sets the report's number within its process. A
    /// [`Client`](crate::Client) that numbers reports gives its next when
    /// none is set.
    ///
    /// ```
    /// use flowstate_client::{FlowStateValue, Report};
    ///
    /// assert_eq!(Report::new(3, FlowStateValue::default()).with_seq(41).seq, Some(41));
    /// ```
    pub fn with_seq(mut self, seq: u64) -> Self {
        self.seq = Some(seq);
        self
    }

    /// Reports what a worker would refuse in the v3 fields that the types
    /// allow: more than [`MAX_FLOW_ERRORS`] errors for a flow, or an empty
    /// message. The error's kind is
    /// [`ErrorKind::InvalidOptions`](crate::ErrorKind::InvalidOptions) and
    /// its reason names the flow. [`Report::to_msgpack`],
    /// [`Client::send`](crate::Client::send) and
    /// [`Client::publish`](crate::Client::publish) send such a report
    /// repaired ([`repair_errors`](crate::repair_errors)) rather than have
    /// the worker refuse it whole, its state sizes with it.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use flowstate_client::{FlowError, FlowStateValue, Report};
    ///
    /// let r = Report::new(3, FlowStateValue::default())
    ///     .with_last_errors(BTreeMap::from([(7, vec![FlowError::new(5, "")])]));
    /// assert!(r.validate().unwrap_err().reason().contains("last_errors[7][0]"));
    /// ```
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |why: String| {
            Error::new(
                ErrorKind::InvalidOptions,
                format!("report of node {}: {why}", self.node_id),
            )
        };
        for (id, errs) in self.last_errors.iter().flatten() {
            if errs.len() > MAX_FLOW_ERRORS {
                return Err(bad(format!(
                    "last_errors[{id}]: {} errors, at most {MAX_FLOW_ERRORS}: keep the newest",
                    errs.len()
                )));
            }
            if let Some(k) = errs.iter().position(|e| e.message.is_empty()) {
                return Err(bad(format!(
                    "last_errors[{id}][{k}].message: empty: say what happened"
                )));
            }
        }
        Ok(())
    }

    /// Returns the report's msgpack form, as it is: a map with the string
    /// keys `node_id`, `node_epoch` (when set), `state_size`,
    /// `last_exec_time_map`, `start_time_map`, then `processed_rows`,
    /// `last_errors` (each error a map of `time` and `message`, each flow's
    /// list repaired as [`repair_errors`](crate::repair_errors) does: empty
    /// messages dropped, the newest 3 kept, each message cut to
    /// [`MAX_ERROR_MESSAGE`](crate::MAX_ERROR_MESSAGE) bytes at a character boundary) and `seq`
    /// when set; integer flow ids ascending, every integer in its shortest
    /// form. (A [`Client`](crate::Client) that numbers reports sends it with
    /// its `node_epoch` and `seq` where the report has none.)
    ///
    /// ```
    /// use flowstate_client::{FlowStateValue, Report};
    ///
    /// let bytes = Report::new(1, FlowStateValue::default()).to_msgpack();
    /// assert_eq!(bytes[0], 0x84); // a map of 4 fields
    /// ```
    pub fn to_msgpack(&self) -> Vec<u8> {
        self.encode(self.node_epoch, self.seq)
    }

    /// Returns the msgpack form of the report with node_epoch and seq.
    pub(crate) fn encode(&self, node_epoch: Option<u64>, seq: Option<u64>) -> Vec<u8> {
        let wire = WireReport {
            node_id: self.node_id,
            node_epoch,
            state_size: &self.value.state_size,
            last_exec_time_map: &self.value.last_exec_time_map,
            start_time_map: &self.value.start_time_map,
            processed_rows: self.processed_rows.as_ref(),
            last_errors: self.last_errors.as_ref().map(WireLastErrors),
            seq,
        };
        // to_vec writes structs as arrays; the protocol needs the names.
        rmp_serde::to_vec_named(&wire).expect("maps of integers and strings always serialize")
    }
}

impl From<FlowStateValue>
    for (
        BTreeMap<FlowId, usize>,
        BTreeMap<FlowId, i64>,
        BTreeMap<FlowId, i64>,
    )
{
    /// Returns the three maps, in the order of GreptimeDB's `FlowStat`.
    fn from(v: FlowStateValue) -> Self {
        (v.state_size, v.last_exec_time_map, v.start_time_map)
    }
}

/// The body of a delta update on `<prefix>.state.delta` (PROTOCOL.md v2):
/// the revision it applies to, and every flow whose aggregate entry changed
/// since then with its entry now (a flow that [`Flow::is_gone`] left).
/// [`Client::watch`](crate::Client::watch) applies them; this type is for
/// those who follow the subject themselves.
///
/// ```
/// use flowstate_client::{Delta, Flow};
///
/// let d = Delta { base: 4, flows: vec![Flow::gone(9)] };
/// assert_eq!(Delta::from_msgpack(&d.to_msgpack()).unwrap(), d);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Delta {
    /// The revision the delta applies to (`Flow-State-Base-Revision`).
    pub base: u64,
    /// The flows that changed, sorted by id.
    pub flows: Vec<Flow>,
}

type WireEntry = (Option<usize>, Option<i64>, Option<i64>);

#[derive(Serialize, Deserialize)]
struct WireDelta {
    base: u64,
    #[serde(default)]
    flows: FlowMap<WireEntry, true>,
}

impl Delta {
    /// Decodes a delta body: a map of `base` and `flows`, each flow an array
    /// of 3, `[state_size, last_exec_time, start_time]`, `nil` for a field
    /// the flow lacks; flow ids (integers or canonical decimal strings)
    /// ascend, each named once. An invalid body returns an error of kind
    /// [`ErrorKind::BadReply`](crate::ErrorKind::BadReply).
    ///
    /// ```
    /// assert!(flowstate_client::Delta::from_msgpack(&[0x80]).is_err()); // no base
    /// ```
    pub fn from_msgpack(data: &[u8]) -> Result<Self, Error> {
        let w: WireDelta = decode_msgpack(data, "delta")?;
        let flows = w
            .flows
            .0
            .into_iter()
            .map(|(id, (state_size, last_exec_time, start_time))| Flow {
                id,
                state_size,
                last_exec_time,
                start_time,
            })
            .collect();
        Ok(Delta {
            base: w.base,
            flows,
        })
    }

    /// Returns the delta's msgpack form, as the worker writes it: `base`,
    /// then `flows` with integer ids ascending and shortest integers.
    ///
    /// ```
    /// let bytes = flowstate_client::Delta { base: 0, flows: vec![] }.to_msgpack();
    /// assert_eq!(bytes[0], 0x82); // a map of 2 fields
    /// ```
    pub fn to_msgpack(&self) -> Vec<u8> {
        let w = WireDelta {
            base: self.base,
            flows: FlowMap(
                self.flows
                    .iter()
                    .map(|f| (f.id, (f.state_size, f.last_exec_time, f.start_time)))
                    .collect(),
            ),
        };
        rmp_serde::to_vec_named(&w).expect("maps of integers always serialize")
    }
}
