//! The heartbeat [`Report`] and the [`Delta`] body.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::value::{Flow, FlowId, FlowStateValue, decode_msgpack};

/// A flownode's heartbeat report (PROTOCOL.md, Heartbeat report). It replaces
/// the node's previous report whole: an empty value removes all of the
/// node's flows from the aggregate.
///
/// ```
/// use std::collections::BTreeMap;
/// use flowstate_client::Report;
///
/// // The maps a GreptimeDB flownode keeps in its FlowStat.
/// let state_size: BTreeMap<u32, usize> = BTreeMap::from([(1, 1024)]);
/// let last_exec_time_map: BTreeMap<u32, i64> = BTreeMap::from([(1, 1_700_000_000_000)]);
/// let start_time_map: BTreeMap<u32, i64> = BTreeMap::new();
/// let report = Report::new(7, (state_size, last_exec_time_map, start_time_map))
///     .with_node_epoch(1_690_000_000_000);
/// assert_eq!(report.node_id, 7);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Report {
    /// The flownode's configured id (GreptimeDB: `header.member_id`).
    pub node_id: u64,
    /// The flownode's start time, unix ms; informational only. `None` leaves
    /// it out of the report.
    pub node_epoch: Option<u64>,
    /// The node's flows.
    pub value: FlowStateValue,
}

/// The report on the wire: field names as strings, node_epoch only when set.
#[derive(Serialize)]
struct WireReport<'a> {
    node_id: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    node_epoch: Option<u64>,
    state_size: &'a BTreeMap<FlowId, usize>,
    last_exec_time_map: &'a BTreeMap<FlowId, i64>,
    start_time_map: &'a BTreeMap<FlowId, i64>,
}

impl Report {
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
            node_epoch: None,
            value: value.into(),
        }
    }

    /// Sets the flownode's start time, unix ms.
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

    /// Returns the report's msgpack form: a map with the string keys
    /// `node_id`, `node_epoch` (when set), `state_size`, `last_exec_time_map`
    /// and `start_time_map`, integer flow ids ascending, every integer in its
    /// shortest form.
    ///
    /// ```
    /// use flowstate_client::{FlowStateValue, Report};
    ///
    /// let bytes = Report::new(1, FlowStateValue::default()).to_msgpack();
    /// assert_eq!(bytes[0], 0x84); // a map of 4 fields
    /// ```
    pub fn to_msgpack(&self) -> Vec<u8> {
        let wire = WireReport {
            node_id: self.node_id,
            node_epoch: self.node_epoch,
            state_size: &self.value.state_size,
            last_exec_time_map: &self.value.last_exec_time_map,
            start_time_map: &self.value.start_time_map,
        };
        // to_vec writes structs as arrays; the protocol needs the names.
        rmp_serde::to_vec_named(&wire).expect("maps of integers always serialize")
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
    flows: Option<BTreeMap<FlowId, WireEntry>>,
}

impl Delta {
    /// Decodes a delta body: a map of `base` and `flows`, each flow an array
    /// of 3, `[state_size, last_exec_time, start_time]`, `nil` for a field
    /// the flow lacks. An invalid body returns an error of kind
    /// [`ErrorKind::BadReply`](crate::ErrorKind::BadReply).
    ///
    /// ```
    /// assert!(flowstate_client::Delta::from_msgpack(&[0x80]).is_err()); // no base
    /// ```
    pub fn from_msgpack(data: &[u8]) -> Result<Self, Error> {
        let w: WireDelta = decode_msgpack(data, "delta")?;
        let flows = w
            .flows
            .unwrap_or_default()
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
            flows: Some(
                self.flows
                    .iter()
                    .map(|f| (f.id, (f.state_size, f.last_exec_time, f.start_time)))
                    .collect(),
            ),
        };
        rmp_serde::to_vec_named(&w).expect("maps of integers always serialize")
    }
}
