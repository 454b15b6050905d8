//! A flow's health (PROTOCOL.md v3): the errors a report carries
//! ([`FlowError`]), and the stats view ([`StatsView`]) with its errors
//! ([`StatsError`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::value::{FlowId, FlowStateValue, decode_msgpack};

/// The most errors a report may carry for one flow, and the stats view
/// keeps per flow.
///
/// ```
/// assert_eq!(flowstate_client::MAX_FLOW_ERRORS, 3);
/// ```
pub const MAX_FLOW_ERRORS: usize = 3;

/// The most bytes of an error's message: a report cuts a longer one at a
/// character boundary before sending it.
///
/// ```
/// assert_eq!(flowstate_client::MAX_ERROR_MESSAGE, 1024);
/// ```
pub const MAX_ERROR_MESSAGE: usize = 1024;

/// One error of a flow on a node, as a report carries it in `last_errors`.
///
/// ```
/// use flowstate_client::FlowError;
///
/// let e = FlowError::new(1_700_000_000_000, "sink table missing");
/// assert_eq!(e.message, "sink table missing");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FlowError {
    /// When it happened, unix ms.
    pub time: i64,
    /// What happened: not empty. A report sends at most
    /// [`MAX_ERROR_MESSAGE`] bytes of it, cut at a character boundary.
    pub message: String,
}

impl FlowError {
    /// Returns the error of `message` at `time` (unix ms).
    ///
    /// ```
    /// let e = flowstate_client::FlowError::new(5, String::from("timeout"));
    /// assert_eq!(e.time, 5);
    /// ```
    pub fn new(time: i64, message: impl Into<String>) -> Self {
        FlowError {
            time,
            message: message.into(),
        }
    }
}

/// Returns `s` cut to at most [`MAX_ERROR_MESSAGE`] bytes at a character
/// boundary: what a report sends of an error's message.
pub(crate) fn cut_message(s: &str) -> &str {
    if s.len() <= MAX_ERROR_MESSAGE {
        return s;
    }
    let mut end = MAX_ERROR_MESSAGE;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Returns a flow's errors as a report sends them (PROTOCOL.md v3, report
/// fields), so that a worker takes the report rather than refuse it whole
/// for one bad error: empty messages dropped, of the rest the first
/// [`MAX_FLOW_ERRORS`] kept (the newest: the list is newest first), each
/// message cut to [`MAX_ERROR_MESSAGE`] bytes at a character boundary.
/// `None` when nothing needs repair. (A message built from bytes that are
/// not UTF-8 with [`String::from_utf8_lossy`] has each maximal invalid
/// part replaced with U+FFFD, as the Go client does.)
///
/// ```
/// use flowstate_client::{FlowError, repair_errors};
///
/// let errs = vec![FlowError::new(3, ""), FlowError::new(2, "b"), FlowError::new(1, "a")];
/// assert_eq!(repair_errors(&errs), Some(vec![FlowError::new(2, "b"), FlowError::new(1, "a")]));
/// assert_eq!(repair_errors(&[FlowError::new(1, "a")]), None);
/// ```
pub fn repair_errors(errs: &[FlowError]) -> Option<Vec<FlowError>> {
    let valid = |e: &FlowError| !e.message.is_empty() && e.message.len() <= MAX_ERROR_MESSAGE;
    if errs.len() <= MAX_FLOW_ERRORS && errs.iter().all(valid) {
        return None;
    }
    Some(
        errs.iter()
            .filter(|e| !e.message.is_empty())
            .take(MAX_FLOW_ERRORS)
            .map(|e| FlowError::new(e.time, cut_message(&e.message)))
            .collect(),
    )
}

/// One error of a flow in the stats view: a node's error, with its node.
///
/// ```
/// use flowstate_client::StatsError;
///
/// let e = StatsError { time: 1_700_000_000_000, node_id: 7, message: "sink table missing".into() };
/// assert_eq!(
///     serde_json::to_string(&e).unwrap(),
///     r#"{"time":1700000000000,"node_id":7,"message":"sink table missing"}"#
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StatsError {
    /// When it happened, unix ms.
    pub time: i64,
    /// The node that reported it.
    pub node_id: u64,
    /// What happened.
    pub message: String,
}

/// The flow stats of a state (PROTOCOL.md v3, the stats view,
/// `Flow-State-View: stats`): GreptimeDB's aggregate (the first three maps,
/// exactly a [`FlowStateValue`]), and per flow the most rows any node
/// processed and the 3 newest errors over the nodes, newest first, each with
/// its node. A flow is in a map only where some node reported it there, and
/// in `last_errors` only with at least one error.
///
/// Its serde derive writes the view's JSON: [`serde_json::to_string`] gives,
/// byte for byte, what a JSON get of the view answers for the same state
/// (fields in order, no spaces, flow ids as strings in ascending numeric
/// order).
///
/// ```
/// use std::collections::BTreeMap;
/// use flowstate_client::{StatsError, StatsView};
///
/// let view = StatsView {
///     state_size: BTreeMap::from([(1, 1024)]),
///     last_exec_time_map: BTreeMap::from([(1, 1_700_000_000_000)]),
///     processed_rows: BTreeMap::from([(1, 52000)]),
///     last_errors: BTreeMap::from([(1, vec![StatsError {
///         time: 1_700_000_000_000,
///         node_id: 7,
///         message: "sink table missing".into(),
///     }])]),
///     ..StatsView::default()
/// };
/// assert_eq!(
///     view.to_json(),
///     r#"{"state_size":{"1":1024},"last_exec_time_map":{"1":1700000000000},"start_time_map":{},"processed_rows":{"1":52000},"last_errors":{"1":[{"time":1700000000000,"node_id":7,"message":"sink table missing"}]}}"#
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StatsView {
    /// For each flow, the bytes of the state in memory (the aggregate's).
    pub state_size: BTreeMap<FlowId, usize>,
    /// For each flow, the last execution time in unix ms (the aggregate's).
    pub last_exec_time_map: BTreeMap<FlowId, i64>,
    /// For each flow, its first execution time in unix ms (the aggregate's).
    pub start_time_map: BTreeMap<FlowId, i64>,
    /// For each flow, the most rows one node reports it processed.
    pub processed_rows: BTreeMap<FlowId, u64>,
    /// For each flow, its newest errors over the nodes, at most
    /// [`MAX_FLOW_ERRORS`], newest first (equal times in ascending node id,
    /// then in the node's order).
    pub last_errors: BTreeMap<FlowId, Vec<StatsError>>,
}

impl StatsView {
    /// Returns the view's aggregate: GreptimeDB's value of the same state.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use flowstate_client::StatsView;
    ///
    /// let view = StatsView { state_size: BTreeMap::from([(1, 8)]), ..StatsView::default() };
    /// assert_eq!(view.value().state_size[&1], 8);
    /// ```
    pub fn value(&self) -> FlowStateValue {
        FlowStateValue::new(
            self.state_size.clone(),
            self.last_exec_time_map.clone(),
            self.start_time_map.clone(),
        )
    }

    /// Returns the view's JSON: the bytes a get of the stats view with
    /// `Accept: application/json` answers for the same state.
    ///
    /// ```
    /// assert_eq!(
    ///     flowstate_client::StatsView::default().to_json(),
    ///     r#"{"state_size":{},"last_exec_time_map":{},"start_time_map":{},"processed_rows":{},"last_errors":{}}"#
    /// );
    /// ```
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("maps of integers and strings always serialize")
    }

    /// Returns the view's msgpack form, as the worker writes it: a map with
    /// the five string keys in order, integer flow ids ascending, each error
    /// a map of `time`, `node_id` and `message`, every integer in its
    /// shortest form.
    ///
    /// ```
    /// use flowstate_client::StatsView;
    ///
    /// let view = StatsView::default();
    /// assert_eq!(StatsView::from_msgpack(&view.to_msgpack()).unwrap(), view);
    /// ```
    pub fn to_msgpack(&self) -> Vec<u8> {
        // to_vec writes structs as arrays; the protocol's maps need the names.
        rmp_serde::to_vec_named(self).expect("maps of integers and strings always serialize")
    }

    /// Decodes a stats view in msgpack form (absent maps are empty; an
    /// aggregate decodes as a view without health). A body that is not
    /// that, or has bytes after it, returns an error of kind
    /// [`ErrorKind::BadReply`](crate::ErrorKind::BadReply).
    ///
    /// ```
    /// assert!(flowstate_client::StatsView::from_msgpack(&[0xc1]).is_err());
    /// ```
    pub fn from_msgpack(data: &[u8]) -> Result<Self, Error> {
        decode_msgpack(data, "stats view")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_message_keeps_at_most_1024_bytes_and_whole_characters() {
        assert_eq!(cut_message("short"), "short");
        let exact = "x".repeat(MAX_ERROR_MESSAGE);
        assert_eq!(cut_message(&exact), exact);
        let long = "y".repeat(MAX_ERROR_MESSAGE + 1);
        assert_eq!(cut_message(&long), &long[..MAX_ERROR_MESSAGE]);
        // "é" is 2 bytes, "日" 3, "😀" 4: byte 1024 falls inside a
        // character for each after one byte of "x".
        for ch in ["é", "日", "😀"] {
            let s = format!("x{}", ch.repeat(MAX_ERROR_MESSAGE));
            let got = cut_message(&s);
            assert!(got.len() <= MAX_ERROR_MESSAGE, "{ch}: {}", got.len());
            assert!(
                got.len() > MAX_ERROR_MESSAGE - ch.len(),
                "{ch}: {}",
                got.len()
            );
            assert!(s.starts_with(got));
        }
    }
}
