//! The client against the real worker and a real nats-server: reports with
//! acknowledgements, every error code, gets of one and of many flows, and
//! the stored JSON bytes.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use flowstate_client::{Client, ErrorKind, FlowStateValue, Options, Report};

use common::{NatsServer, Worker, client, client_with, eventually};

fn flows(ids: std::ops::Range<u32>, seed: i64) -> FlowStateValue {
    FlowStateValue::new(
        ids.clone()
            .map(|id| (id, 1024 * (id as usize + 1)))
            .collect(),
        ids.clone()
            .map(|id| (id, 1_700_000_000_000 + seed + id as i64))
            .collect(),
        ids.map(|id| (id, 1_690_000_000_000 + id as i64)).collect(),
    )
}

#[tokio::test]
async fn send_is_acknowledged_with_a_growing_revision_of_one_epoch_and_publish_arrives() {
    let server = NatsServer::start(&[]);
    let _w = Worker::start(&server.url, "rsack", &[]).await;
    let c = client(&server.url, "rsack").await;

    let v1 = c
        .send(&Report::new(1, flows(1..3, 0)).with_node_epoch(1))
        .await
        .unwrap();
    assert!(v1.revision > 0 && !v1.epoch.is_empty(), "{v1:?}");
    let v2 = c.send(&Report::new(2, flows(10..11, 0))).await.unwrap();
    assert_eq!(v2.epoch, v1.epoch);
    assert!(v2.revision > v1.revision);

    // A get after the ack sees the report.
    let s = c.get().await.unwrap();
    assert!(s.version.revision >= v2.revision);
    let mut want = flows(1..3, 0);
    want.apply(&flows(10..11, 0).flows());
    assert_eq!(s.value, want);
    assert_eq!(s.chunks, 1, "a small state is one chunk");

    // A published report arrives without an ack.
    c.publish(&Report::new(3, flows(20..21, 0))).await.unwrap();
    eventually("the published report", || async {
        let s = c.get().await.unwrap();
        s.value.state_size.contains_key(&20).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_report_past_max_flows_is_rejected_400_and_changes_nothing() {
    let server = NatsServer::start(&[]);
    let _w = Worker::start(&server.url, "rs400", &["--max-flows", "2"]).await;
    let c = client(&server.url, "rs400").await;
    let before = c.get().await.unwrap();
    let err = c.send(&Report::new(1, flows(0..3, 0))).await.unwrap_err();
    assert_eq!(
        (err.kind(), err.code()),
        (ErrorKind::Rejected, Some(400)),
        "{err}"
    );
    assert_eq!(err.subject(), Some("rs400.heartbeat.1"));
    assert!(
        err.to_string().contains("sending it again will not help"),
        "{err}"
    );
    assert_eq!(c.get().await.unwrap(), before, "nothing changed");
}

#[tokio::test]
async fn a_node_past_max_nodes_is_refused_507_naming_the_limit() {
    let server = NatsServer::start(&[]);
    let _w = Worker::start(&server.url, "rs507", &["--max-nodes", "2"]).await;
    let c = client(&server.url, "rs507").await;
    c.send(&Report::new(1, flows(1..2, 0))).await.unwrap();
    c.send(&Report::new(2, flows(2..3, 0))).await.unwrap();
    let err = c.send(&Report::new(3, flows(3..4, 0))).await.unwrap_err();
    assert_eq!(
        (err.kind(), err.code()),
        (ErrorKind::Capacity, Some(507)),
        "{err}"
    );
    assert!(err.reason().contains("max-nodes"), "{err}");
    // A known node's report still goes through.
    c.send(&Report::new(1, flows(1..2, 5))).await.unwrap();
}

#[tokio::test]
async fn a_single_get_past_the_max_payload_is_413_and_the_chunked_get_reads_it() {
    let server = NatsServer::with_max_payload(8 * 1024);
    let _w = Worker::start(&server.url, "rs413", &[]).await;
    let c = client(&server.url, "rs413").await;
    // About 30 bytes a flow: 1,200 flows are 4 times the max payload, in
    // reports of 200 flows that each fit.
    let mut want = FlowStateValue::default();
    for node in 0..6u32 {
        let v = flows(node * 200..(node + 1) * 200, node as i64);
        want.apply(&v.flows());
        c.send(&Report::new(node as u64, v)).await.unwrap();
    }
    let err = c.get_single().await.unwrap_err();
    assert_eq!(
        (err.kind(), err.code()),
        (ErrorKind::TooLarge, Some(413)),
        "{err}"
    );
    assert!(
        err.to_string().contains("Client::get"),
        "says what to do: {err}"
    );
    let s = c.get().await.unwrap();
    assert!(s.chunks > 1, "{} chunks", s.chunks);
    assert_eq!(s.value, want);
}

#[tokio::test]
async fn a_report_to_a_jetstream_worker_whose_jetstream_is_gone_is_503() {
    let mut server = NatsServer::with_jetstream();
    let _w = Worker::start(&server.url, "rs503", &["--kv", "jetstream"]).await;
    let c = client(&server.url, "rs503").await;
    c.send(&Report::new(1, flows(1..2, 0))).await.unwrap();

    // The same port, without JetStream: the worker reconnects, its store
    // cannot take writes.
    server.restart_with(&[]);
    let err = eventually("a 503", || async {
        match c.send(&Report::new(1, flows(1..2, 1))).await {
            Err(e) if e.kind() == ErrorKind::Unavailable => Some(e),
            _ => None,
        }
    })
    .await;
    assert_eq!(err.code(), Some(503));
    assert!(err.to_string().contains("retry after a pause"), "{err}");
}

#[tokio::test]
async fn without_a_worker_requests_fail_no_worker_and_a_bad_prefix_is_refused() {
    let server = NatsServer::start(&[]);
    let c = client(&server.url, "rsnone").await;
    let err = c
        .send(&Report::new(1, FlowStateValue::default()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoWorker, "{err}");
    assert!(
        err.to_string().contains("--prefix"),
        "says what to do: {err}"
    );
    assert_eq!(c.get().await.unwrap_err().kind(), ErrorKind::NoWorker);

    let nats = async_nats::connect(&server.url).await.unwrap();
    for prefix in ["", "a..b", "flow.*", "fl ow"] {
        let err = Client::new(
            nats.clone(),
            Options {
                prefix: prefix.into(),
                ..Options::default()
            },
        )
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidOptions, "{prefix:?}");
    }
}

#[tokio::test]
async fn the_json_get_is_serde_json_of_the_value_byte_for_byte() {
    let server = NatsServer::start(&[]);
    let _w = Worker::start(&server.url, "rsjson", &[]).await;
    let c = client(&server.url, "rsjson").await;
    // Flow ids 2 and 10 (numeric order), extreme values, a flow in one map.
    let v = FlowStateValue::new(
        BTreeMap::from([(2, 1), (10, usize::MAX)]),
        BTreeMap::from([(2, i64::MIN), (10, i64::MAX)]),
        BTreeMap::from([(4_294_967_295, -1)]),
    );
    c.send(&Report::new(1, v.clone())).await.unwrap();
    c.send(&Report::new(2, flows(100..150, 3))).await.unwrap();
    let stored = c.get_json().await.unwrap();
    let got = c.get().await.unwrap();
    assert_eq!(stored.version, got.version);
    assert_eq!(
        std::str::from_utf8(&stored.json).unwrap(),
        serde_json::to_string(&got.value).unwrap()
    );
    let mut want = v;
    want.apply(&flows(100..150, 3).flows());
    assert_eq!(got.value, want);
}

/// The number of flows of the big get: FLOWSTATE_RUST_BIG_GET (make bench
/// sets 1000000), else 100,000.
fn big_get_flows() -> u32 {
    std::env::var("FLOWSTATE_RUST_BIG_GET")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_of_many_flows_comes_in_chunks_under_the_default_max_payload() {
    let n = big_get_flows();
    let per_node = 10_000u32;
    let limit = n.to_string();
    let server = NatsServer::start(&[]);
    let _w = Worker::start(&server.url, "rsbig", &["--max-total-flows", &limit]).await;
    let c = client_with(
        &server.url,
        Options {
            prefix: "rsbig".into(),
            timeout: Duration::from_secs(60),
            ..Options::default()
        },
    )
    .await;
    let mut want = FlowStateValue::default();
    for node in 0..n.div_ceil(per_node) {
        let v = flows(node * per_node..((node + 1) * per_node).min(n), 0);
        want.apply(&v.flows());
        c.send(&Report::new(node as u64, v)).await.unwrap();
    }
    let started = std::time::Instant::now();
    let s = c.get().await.unwrap();
    eprintln!(
        "FIGURES get of {n} flows: {} chunks in {:?}",
        s.chunks,
        started.elapsed()
    );
    let max_payload = c.nats().server_info().max_payload;
    assert_eq!(s.value.state_size.len(), n as usize);
    assert!(
        s.chunks as u64 >= (s.value.to_msgpack().len() / max_payload) as u64,
        "{} chunks",
        s.chunks
    );
    assert!(s.chunks > 1);
    assert_eq!(s.value, want);
}
