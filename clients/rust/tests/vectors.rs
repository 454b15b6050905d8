//! The shared test vectors (testdata/vectors, generated from the Go codec):
//! this crate must encode and decode each byte for byte. The report vectors
//! are also sent to a live worker, in live_vectors.rs.

use std::collections::BTreeMap;
use std::path::Path;

use flowstate_client::{Delta, Flow, FlowStateValue, Report};
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
        let mut last: Option<u32> = None;
        for (i, body) in c.chunks.iter().enumerate() {
            let bytes = unhex(body);
            assert!(
                bytes.len() <= c.budget,
                "{}: chunk {} over budget",
                c.name,
                i + 1
            );
            let v = FlowStateValue::from_msgpack(&bytes).unwrap();
            assert_eq!(
                hex(&v.to_msgpack()),
                *body,
                "{}: chunk {} not canonical",
                c.name,
                i + 1
            );
            let flows = v.flows();
            if let (Some(first), Some(last)) = (flows.first(), last) {
                assert!(first.id > last, "{}: chunk {} overlaps", c.name, i + 1);
            }
            last = flows.last().map(|f| f.id).or(last);
            joined.apply(&flows);
        }
        assert_eq!(joined, value_of(&c.flows), "{}: joined", c.name);
    }
}

#[derive(Deserialize)]
pub struct ReportFile {
    pub max_flows: usize,
    pub cases: Vec<ReportCase>,
}

#[derive(Deserialize)]
pub struct ReportCase {
    pub name: String,
    pub node: String,
    pub msgpack: String,
    pub canonical: bool,
    pub accepted: Option<Accepted>,
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
    let f: ReportFile = load("reports.json");
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

mod common;

/// Sends every report vector to a worker run with the vectors' --max-flows:
/// an accepted one is acknowledged and the aggregate is its flows, a rejected
/// one is answered with the vector's code and reason, through the client's
/// typed error.
#[tokio::test]
async fn a_worker_answers_every_report_vector_as_the_vector_says() {
    use flowstate_client::ErrorKind;

    let f: ReportFile = load("reports.json");
    let server = common::NatsServer::start(&[]);
    let max_flows = f.max_flows.to_string();
    let _worker = common::Worker::start(&server.url, "rsvec", &["--max-flows", &max_flows]).await;
    let c = common::client(&server.url, "rsvec").await;
    for case in &f.cases {
        let subject = format!("rsvec.heartbeat.{}", case.node);
        let reply = c
            .nats()
            .request(subject.clone(), unhex(&case.msgpack).into())
            .await
            .unwrap();
        let h = reply.headers.as_ref();
        let code = h
            .and_then(|h| h.get("Nats-Service-Error-Code"))
            .map(|v| v.as_str().to_string());
        let reason = h
            .and_then(|h| h.get("Nats-Service-Error"))
            .map(|v| v.as_str().to_string());
        if let Some(r) = &case.rejected {
            assert_eq!(
                code.as_deref(),
                Some(r.code.to_string().as_str()),
                "{}: code",
                case.name
            );
            assert_eq!(
                reason.as_deref(),
                Some(r.error.as_str()),
                "{}: reason ({} at {:?})",
                case.name,
                r.kind,
                r.field
            );
            continue;
        }
        assert_eq!(code, None, "{}: rejected: {reason:?}", case.name);
        let a = case.accepted.as_ref().unwrap();
        let snapshot = c.get().await.unwrap();
        assert_eq!(
            snapshot.value,
            value_of(&a.flows),
            "{}: the aggregate is the report's flows",
            case.name
        );
        // An empty report takes them out again.
        c.send(&Report::new(
            a.node_id.parse().unwrap(),
            FlowStateValue::default(),
        ))
        .await
        .unwrap();
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
