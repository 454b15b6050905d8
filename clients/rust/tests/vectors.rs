//! The shared test vectors (testdata/vectors, generated from the Go codec):
//! this crate must encode and decode each byte for byte. The report vectors
//! are also sent to a live worker, at the end of this file.

use std::collections::BTreeMap;
use std::path::Path;

use flowstate_client::{
    Delta, ErrorKind, Flow, FlowError, FlowStateValue, MAX_ERROR_MESSAGE, Options, Report,
    StatsError, StatsView, repair_errors,
};
use serde::Deserialize;

#[derive(Deserialize)]
pub struct VFlow {
    pub id: u32,
    pub state_size: Option<String>,
    pub last_exec_time: Option<String>,
    pub start_time: Option<String>,
}

impl VFlow {
    fn flow(&self) -> Flow {
        Flow {
            id: self.id,
            state_size: self.state_size.as_ref().map(|s| s.parse().unwrap()),
            last_exec_time: self.last_exec_time.as_ref().map(|s| s.parse().unwrap()),
            start_time: self.start_time.as_ref().map(|s| s.parse().unwrap()),
        }
    }
}

fn value_of(flows: &[VFlow]) -> FlowStateValue {
    let mut v = FlowStateValue::default();
    v.apply(&flows.iter().map(VFlow::flow).collect::<Vec<_>>());
    v
}

fn load<T: for<'de> Deserialize<'de>>(name: &str) -> T {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/vectors")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[derive(Deserialize)]
struct Cases<T> {
    cases: Vec<T>,
}

#[derive(Deserialize)]
struct AggregateCase {
    name: String,
    flows: Vec<VFlow>,
    msgpack: String,
    json: String,
}

#[test]
fn aggregates_encode_and_decode_byte_for_byte() {
    let f: Cases<AggregateCase> = load("aggregates.json");
    assert!(!f.cases.is_empty());
    for c in &f.cases {
        let v = value_of(&c.flows);
        assert_eq!(hex(&v.to_msgpack()), c.msgpack, "{}: msgpack", c.name);
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            c.json,
            "{}: serde_json",
            c.name
        );
        assert_eq!(v.to_json(), c.json, "{}: to_json", c.name);
        assert_eq!(
            FlowStateValue::from_msgpack(&unhex(&c.msgpack)).unwrap(),
            v,
            "{}: decoded msgpack",
            c.name
        );
        assert_eq!(
            serde_json::from_str::<FlowStateValue>(&c.json).unwrap(),
            v,
            "{}: decoded JSON",
            c.name
        );
    }
}

#[derive(Deserialize)]
struct DeltaCase {
    name: String,
    base: String,
    flows: Vec<VFlow>,
    msgpack: String,
}

#[test]
fn deltas_encode_and_decode_byte_for_byte() {
    let f: Cases<DeltaCase> = load("deltas.json");
    assert!(!f.cases.is_empty());
    for c in &f.cases {
        let want = Delta {
            base: c.base.parse().unwrap(),
            flows: c.flows.iter().map(VFlow::flow).collect(),
        };
        assert_eq!(
            Delta::from_msgpack(&unhex(&c.msgpack)).unwrap(),
            want,
            "{}: decoded",
            c.name
        );
        assert_eq!(hex(&want.to_msgpack()), c.msgpack, "{}: msgpack", c.name);
    }
}

#[derive(Deserialize)]
struct ChunkCase {
    name: String,
    budget: usize,
    flows: Vec<VFlow>,
    chunks: Vec<String>,
}

#[test]
fn chunks_join_into_their_aggregate_each_canonical_and_within_budget() {
    let f: Cases<ChunkCase> = load("chunks.json");
    assert!(!f.cases.is_empty());
    for c in &f.cases {
        let mut joined = FlowStateValue::default();
        let chunks = check_chunks(
            &c.name,
            c.budget,
            &c.chunks,
            |b| FlowStateValue::from_msgpack(b).unwrap(),
            FlowStateValue::to_msgpack,
            |v| v.flows().iter().map(|f| f.id).collect(),
        );
        for v in chunks {
            joined.apply(&v.flows());
        }
        assert_eq!(joined, value_of(&c.flows), "{}: joined", c.name);
    }
}

/// Decodes the chunks (hex) of case name, asserting that each is within
/// budget and canonical (encode writes its bytes again), and that their
/// flow ids (ids, ascending) ascend from chunk to chunk without overlap.
fn check_chunks<T>(
    name: &str,
    budget: usize,
    chunks: &[String],
    decode: impl Fn(&[u8]) -> T,
    encode: impl Fn(&T) -> Vec<u8>,
    ids: impl Fn(&T) -> Vec<u32>,
) -> Vec<T> {
    let mut last: Option<u32> = None;
    let mut out = Vec::new();
    for (i, body) in chunks.iter().enumerate() {
        let bytes = unhex(body);
        let n = i + 1;
        assert!(bytes.len() <= budget, "{name}: chunk {n} over budget");
        let v = decode(&bytes);
        assert_eq!(hex(&encode(&v)), *body, "{name}: chunk {n} not canonical");
        let ids = ids(&v);
        if let (Some(&first), Some(last)) = (ids.first(), last) {
            assert!(first > last, "{name}: chunk {n} overlaps");
        }
        last = ids.last().copied().or(last);
        out.push(v);
    }
    out
}

/// A file of report vectors, each accepted as A or rejected.
#[derive(Deserialize)]
pub struct ReportFile<A> {
    pub max_flows: usize,
    pub cases: Vec<ReportCase<A>>,
}

#[derive(Deserialize)]
pub struct ReportCase<A> {
    pub name: String,
    pub node: String,
    pub msgpack: String,
    pub canonical: bool,
    pub accepted: Option<A>,
    pub rejected: Option<Rejected>,
}

#[derive(Deserialize)]
pub struct Accepted {
    pub node_id: String,
    pub node_epoch: Option<String>,
    pub flows: Vec<VFlow>,
}

#[derive(Deserialize)]
pub struct Rejected {
    pub code: u16,
    pub kind: String,
    pub field: String,
    pub error: String,
}

#[test]
fn canonical_reports_encode_byte_for_byte() {
    let f: ReportFile<Accepted> = load("reports.json");
    let mut n = 0;
    for c in f.cases.iter().filter(|c| c.canonical) {
        let a = c.accepted.as_ref().expect("a canonical report is accepted");
        let mut r = Report::new(a.node_id.parse().unwrap(), value_of(&a.flows));
        r.node_epoch = a.node_epoch.as_ref().map(|e| e.parse().unwrap());
        assert_eq!(hex(&r.to_msgpack()), c.msgpack, "{}", c.name);
        n += 1;
    }
    assert!(n > 0, "no canonical report");
}

#[test]
fn rmp_serde_to_vec_writes_structs_as_arrays_which_the_protocol_refuses() {
    // The trap this crate avoids: to_vec drops the field names.
    let v = FlowStateValue::new(BTreeMap::from([(1, 1)]), BTreeMap::new(), BTreeMap::new());
    let arrays = rmp_serde::to_vec(&v).unwrap();
    assert_eq!(arrays[0], 0x93, "an array of 3");
    assert_eq!(v.to_msgpack()[0], 0x83, "a map of 3");
}

/// A health of the v3 vectors: each member absent when the field is.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct VHealth {
    pub processed_rows: Option<Vec<VRows>>,
    pub last_errors: Option<Vec<VErrors>>,
    pub seq: Option<String>,
    pub retired_epochs: Option<Vec<String>>,
}

#[derive(Deserialize)]
pub struct VRows {
    pub id: u32,
    pub rows: String,
}

#[derive(Deserialize)]
pub struct VErrors {
    pub id: u32,
    pub errors: Vec<VError>,
}

#[derive(Deserialize)]
pub struct VError {
    pub time: String,
    pub node_id: Option<String>,
    pub message: String,
}

fn rows_of(rows: &[VRows]) -> BTreeMap<u32, u64> {
    rows.iter()
        .map(|r| (r.id, r.rows.parse().unwrap()))
        .collect()
}

fn flow_errors_of(errs: &[VErrors]) -> BTreeMap<u32, Vec<FlowError>> {
    errs.iter()
        .map(|f| {
            let errors = f
                .errors
                .iter()
                .map(|e| FlowError::new(e.time.parse().unwrap(), e.message.clone()))
                .collect();
            (f.id, errors)
        })
        .collect()
}

fn stats_errors_of(errs: &[VErrors]) -> BTreeMap<u32, Vec<StatsError>> {
    errs.iter()
        .map(|f| {
            let errors = f
                .errors
                .iter()
                .map(|e| StatsError {
                    time: e.time.parse().unwrap(),
                    node_id: e
                        .node_id
                        .as_ref()
                        .expect("a view's error has its node")
                        .parse()
                        .unwrap(),
                    message: e.message.clone(),
                })
                .collect();
            (f.id, errors)
        })
        .collect()
}

#[derive(Deserialize)]
pub struct AcceptedV3 {
    pub node_id: String,
    pub node_epoch: Option<String>,
    pub flows: Vec<VFlow>,
    pub health: VHealth,
}

impl AcceptedV3 {
    /// The report the vector holds, as this crate's Report.
    fn report(&self) -> Report {
        let h = &self.health;
        Report {
            node_id: self.node_id.parse().unwrap(),
            node_epoch: self.node_epoch.as_ref().map(|e| e.parse().unwrap()),
            value: value_of(&self.flows),
            processed_rows: h.processed_rows.as_deref().map(rows_of),
            last_errors: h.last_errors.as_deref().map(flow_errors_of),
            seq: h.seq.as_ref().map(|s| s.parse().unwrap()),
        }
    }
}

#[test]
fn canonical_v3_reports_encode_byte_for_byte() {
    let f: ReportFile<AcceptedV3> = load("reports_v3.json");
    let mut n = 0;
    for c in f.cases.iter().filter(|c| c.canonical) {
        let r = c
            .accepted
            .as_ref()
            .expect("a canonical report is accepted")
            .report();
        r.validate().unwrap();
        assert_eq!(hex(&r.to_msgpack()), c.msgpack, "{}", c.name);
        n += 1;
    }
    assert!(n >= 3, "{n} canonical reports");
}

#[test]
fn the_reports_the_v3_vectors_refuse_for_errors_are_named_by_validate_or_cut() {
    let f: ReportFile<AcceptedV3> = load("reports_v3.json");
    let case = |name: &str| {
        f.cases
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no vector {name:?}"))
    };
    let with_errors = |errors: Vec<FlowError>| {
        Report::new(1, FlowStateValue::default()).with_last_errors(BTreeMap::from([(7, errors)]))
    };
    // What the worker refuses that the types allow, validate names as the
    // worker does (the client sends it repaired: error_repairs.json).
    for (name, report) in [
        (
            "more than 3 errors for a flow",
            with_errors(vec![FlowError::new(1, "a"); 4]),
        ),
        ("an empty message", with_errors(vec![FlowError::new(1, "")])),
    ] {
        let rejected = case(name).rejected.as_ref().expect("rejected");
        let err = report.validate().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidOptions, "{name}: {err}");
        assert!(
            err.reason().contains(&rejected.field),
            "{name}: {err} names {}",
            rejected.field
        );
    }
    // A message of 1,025 bytes, refused by the worker, is cut to 1,024 by
    // the client: the bytes of a vector the worker accepts.
    assert!(case("a message of 1025 bytes").rejected.is_some());
    let three = case("three errors of 1024 bytes, extreme values");
    let want = three.accepted.as_ref().unwrap().report();
    let mut longer = want.clone();
    let mut n = 0;
    for errs in longer.last_errors.as_mut().unwrap().values_mut() {
        for e in errs
            .iter_mut()
            .filter(|e| e.message.len() == MAX_ERROR_MESSAGE)
        {
            // One more character past the limit, of the message's own kind
            // ("é" puts byte 1,024 inside a character).
            let ch = e.message.chars().last().unwrap();
            e.message.push(ch);
            n += 1;
        }
    }
    assert!(n >= 2, "{n} messages at the limit");
    assert_eq!(hex(&longer.to_msgpack()), three.msgpack);
}

#[derive(Deserialize)]
struct RepairCase {
    name: String,
    errors: Vec<RepairError>,
    sent: Vec<RepairError>,
    repaired: bool,
}

#[derive(Deserialize)]
struct RepairError {
    time: String,
    message_hex: String,
}

impl RepairError {
    /// The error as a flownode holds it: bytes that are not UTF-8 made a
    /// String with from_utf8_lossy.
    fn error(&self) -> FlowError {
        let bytes = unhex(&self.message_hex);
        FlowError::new(
            self.time.parse().unwrap(),
            String::from_utf8_lossy(&bytes).into_owned(),
        )
    }
}

#[test]
fn error_lists_are_sent_repaired_as_the_go_client_sends_them() {
    let f: Cases<RepairCase> = load("error_repairs.json");
    assert!(f.cases.iter().any(|c| c.repaired));
    for c in &f.cases {
        let errors: Vec<FlowError> = c.errors.iter().map(RepairError::error).collect();
        let sent: Vec<FlowError> = c
            .sent
            .iter()
            .map(|e| {
                let m = String::from_utf8(unhex(&e.message_hex)).expect("what is sent is UTF-8");
                FlowError::new(e.time.parse().unwrap(), m)
            })
            .collect();
        // A list the Go client repairs only for its bytes is valid here
        // once it is a String.
        let got = repair_errors(&errors).unwrap_or_else(|| errors.clone());
        assert_eq!(got, sent, "{}", c.name);
        // The encoded report carries the repaired list, and validates.
        let report = Report::new(1, FlowStateValue::default())
            .with_last_errors(BTreeMap::from([(1, errors)]));
        let repaired =
            Report::new(1, FlowStateValue::default()).with_last_errors(BTreeMap::from([(1, sent)]));
        repaired.validate().unwrap();
        assert_eq!(
            hex(&report.to_msgpack()),
            hex(&repaired.to_msgpack()),
            "{}",
            c.name
        );
    }
}

#[derive(Deserialize)]
struct StatsCase {
    name: String,
    flows: Vec<VFlow>,
    processed_rows: Vec<VRows>,
    last_errors: Vec<VErrors>,
    msgpack: String,
    json: String,
    budget: Option<usize>,
    chunks: Option<Vec<String>>,
}

impl StatsCase {
    fn view(&self) -> StatsView {
        let v = value_of(&self.flows);
        StatsView {
            state_size: v.state_size,
            last_exec_time_map: v.last_exec_time_map,
            start_time_map: v.start_time_map,
            processed_rows: rows_of(&self.processed_rows),
            last_errors: stats_errors_of(&self.last_errors),
        }
    }
}

#[test]
fn stats_views_decode_and_encode_msgpack_and_json_byte_for_byte() {
    let f: Cases<StatsCase> = load("stats.json");
    assert!(!f.cases.is_empty());
    for c in &f.cases {
        let want = c.view();
        let got = StatsView::from_msgpack(&unhex(&c.msgpack)).unwrap();
        assert_eq!(got, want, "{}: decoded msgpack", c.name);
        assert_eq!(
            serde_json::to_string(&got).unwrap(),
            c.json,
            "{}: serde_json",
            c.name
        );
        assert_eq!(got.to_json(), c.json, "{}: to_json", c.name);
        assert_eq!(hex(&got.to_msgpack()), c.msgpack, "{}: msgpack", c.name);
        assert_eq!(
            serde_json::from_str::<StatsView>(&c.json).unwrap(),
            want,
            "{}: decoded JSON",
            c.name
        );
        assert_eq!(got.value(), value_of(&c.flows), "{}: the aggregate", c.name);
    }
}

#[test]
fn stats_chunks_join_into_their_view_each_canonical_and_within_budget() {
    let f: Cases<StatsCase> = load("stats.json");
    let mut n = 0;
    for c in f.cases.iter().filter(|c| c.chunks.is_some()) {
        let budget = c.budget.expect("chunks come with a budget");
        let chunks = c.chunks.as_ref().unwrap();
        assert!(chunks.len() > 1, "{}: one chunk", c.name);
        let mut joined = StatsView::default();
        let views = check_chunks(
            &c.name,
            budget,
            chunks,
            |b| StatsView::from_msgpack(b).unwrap(),
            StatsView::to_msgpack,
            |v| {
                let ids: std::collections::BTreeSet<u32> = (v.state_size.keys())
                    .chain(v.last_exec_time_map.keys())
                    .chain(v.start_time_map.keys())
                    .chain(v.processed_rows.keys())
                    .chain(v.last_errors.keys())
                    .copied()
                    .collect();
                ids.into_iter().collect()
            },
        );
        for v in views {
            joined.state_size.extend(v.state_size);
            joined.last_exec_time_map.extend(v.last_exec_time_map);
            joined.start_time_map.extend(v.start_time_map);
            joined.processed_rows.extend(v.processed_rows);
            joined.last_errors.extend(v.last_errors);
        }
        assert_eq!(joined, c.view(), "{}: joined", c.name);
        assert_eq!(joined.to_json(), c.json, "{}: joined JSON", c.name);
        n += 1;
    }
    assert!(n > 0, "no chunked view");
}

#[derive(Deserialize)]
struct StoredCase {
    name: String,
    valid: bool,
    #[serde(default)]
    flows: Vec<VFlow>,
    json: String,
}

#[test]
fn every_stored_node_value_reads_as_greptimedbs_flow_state_value() {
    // GreptimeDB's serde (this crate's FlowStateValue derive) reads a node's
    // stored value, v3 fields or not, valid or not, as its three maps.
    let f: Cases<StoredCase> = load("stored_values.json");
    assert!(f.cases.iter().any(|c| !c.valid));
    for c in &f.cases {
        let v: FlowStateValue =
            serde_json::from_str(&c.json).unwrap_or_else(|e| panic!("{}: {e}", c.name));
        if c.valid {
            assert_eq!(v, value_of(&c.flows), "{}", c.name);
        }
    }
}

mod common;

/// A nats-server and a worker run with a vector file's --max-flows, and
/// clients of its prefix.
struct VectorWorker {
    prefix: String,
    client: flowstate_client::Client,
    /// A client that sends reports as given, for Self::clear.
    unnumbered: flowstate_client::Client,
    _worker: common::Worker,
    _server: common::NatsServer,
}

impl VectorWorker {
    async fn start(prefix: &str, max_flows: usize) -> Self {
        let server = common::NatsServer::start(&[]);
        let max_flows = max_flows.to_string();
        let worker = common::Worker::start(&server.url, prefix, &["--max-flows", &max_flows]).await;
        let options = Options {
            prefix: prefix.into(),
            unnumbered: true,
            ..Options::default()
        };
        VectorWorker {
            prefix: prefix.into(),
            client: common::client(&server.url, prefix).await,
            unnumbered: common::client_with(&server.url, options).await,
            _worker: worker,
            _server: server,
        }
    }

    /// Takes node's flows out again with an empty report, sent unnumbered:
    /// a numbered one would carry the client's node_epoch, which the next
    /// vector of the node, sent without one, retires (and the worker would
    /// then refuse the client's next report as stale).
    async fn clear(&self, node: &str) {
        let empty = Report::new(node.parse().unwrap(), FlowStateValue::default());
        self.unnumbered.send(&empty).await.unwrap();
    }

    /// Sends a vector's report as a request on its node's subject and
    /// asserts that it was answered as the vector says: with its code and
    /// reason when rejected, without an error otherwise. Returns whether it
    /// was rejected.
    async fn rejects<A>(&self, case: &ReportCase<A>) -> bool {
        let name = &case.name;
        let subject = format!("{}.heartbeat.{}", self.prefix, case.node);
        let reply = self
            .client
            .nats()
            .request(subject, unhex(&case.msgpack).into())
            .await
            .unwrap();
        let h = reply.headers.as_ref();
        let header = |name: &str| h.and_then(|h| h.get(name)).map(|v| v.as_str().to_string());
        let (code, reason) = (
            header("Nats-Service-Error-Code"),
            header("Nats-Service-Error"),
        );
        let Some(r) = &case.rejected else {
            assert_eq!(code, None, "{name}: rejected: {reason:?}");
            return false;
        };
        assert_eq!(
            code.as_deref(),
            Some(r.code.to_string().as_str()),
            "{name}: code"
        );
        assert_eq!(
            reason.as_deref(),
            Some(r.error.as_str()),
            "{name}: reason ({} at {:?})",
            r.kind,
            r.field
        );
        true
    }
}

/// Sends every report vector to a worker run with the vectors' --max-flows:
/// an accepted one is acknowledged and the aggregate is its flows, a rejected
/// one is answered with the vector's code and reason, through the client's
/// typed error.
#[tokio::test]
async fn a_worker_answers_every_report_vector_as_the_vector_says() {
    let f: ReportFile<Accepted> = load("reports.json");
    let w = VectorWorker::start("rsvec", f.max_flows).await;
    let c = &w.client;
    for case in &f.cases {
        if w.rejects(case).await {
            continue;
        }
        let a = case.accepted.as_ref().unwrap();
        let snapshot = c.get().await.unwrap();
        assert_eq!(
            snapshot.value,
            value_of(&a.flows),
            "{}: the aggregate is the report's flows",
            case.name
        );
        w.clear(&a.node_id).await;
    }
    // The typed error of a rejected report sent through the client.
    let many = FlowStateValue::new(
        (0..=f.max_flows as u32).map(|id| (id, 1)).collect(),
        BTreeMap::new(),
        BTreeMap::new(),
    );
    let err = c.send(&Report::new(1, many)).await.unwrap_err();
    assert_eq!(
        (err.kind(), err.code()),
        (ErrorKind::Rejected, Some(400)),
        "{err}"
    );
    assert!(err.reason().contains("flows"), "{err}");
}

/// Sends every v3 report vector to a worker run with the vectors'
/// --max-flows: a rejected one is answered with the vector's code and
/// reason; an accepted one is acknowledged, and the stats view shows its
/// health, each error with its node.
#[tokio::test]
async fn a_worker_answers_every_v3_report_vector_as_the_vector_says() {
    let f: ReportFile<AcceptedV3> = load("reports_v3.json");
    let w = VectorWorker::start("rsvec3", f.max_flows).await;
    let c = &w.client;
    for case in &f.cases {
        if w.rejects(case).await {
            continue;
        }
        let a = case.accepted.as_ref().unwrap();
        let stats = c.get_stats().await.unwrap();
        let want = common::view_of(&[a.report()]);
        assert_eq!(
            stats.view, want,
            "{}: the stats view is the report's",
            case.name
        );
        w.clear(&a.node_id).await;
    }
}
