//! The client against the real worker and a real nats-server: reports with
//! acknowledgements, every error code, gets of one and of many flows, the
//! stored JSON bytes, numbered reports and the stats view.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use flowstate_client::{Client, ErrorKind, FlowError, FlowStateValue, Options, Report, StatsError};

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
            // The worker's --max-total-flows, and bytes to match.
            max_flows: (n as usize).max(flowstate_client::DEFAULT_MAX_FLOWS),
            max_get_bytes: usize::MAX,
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

#[tokio::test]
async fn a_client_numbers_its_reports_so_that_an_older_one_is_refused_409() {
    let server = NatsServer::start(&[]);
    let _w = Worker::start(&server.url, "rs409", &[]).await;
    let c = client(&server.url, "rs409").await;
    let epoch = c.node_epoch().expect("numbered by default");

    // The same report sent twice, as a retry would: each send is numbered
    // anew (seq 1, then 2), so both are applied.
    let report = Report::new(1, flows(1..3, 0));
    let v1 = c.send(&report).await.unwrap();
    let v2 = c.send(&report).await.unwrap();
    assert!(v2.revision > v1.revision, "{v1} then {v2}");

    // A report of the same process numbered below the last one, as a report
    // held in the network would arrive: refused, and nothing changes.
    let before = c.get().await.unwrap();
    let err = c
        .send(&Report::new(1, flows(5..6, 0)).with_seq(1))
        .await
        .unwrap_err();
    assert_eq!(
        (err.kind(), err.code()),
        (ErrorKind::Stale, Some(409)),
        "{err}"
    );
    assert_eq!(err.subject(), Some("rs409.heartbeat.1"));
    for named in [epoch.to_string(), "seq 1".to_string(), "seq 2".to_string()] {
        assert!(err.reason().contains(&named), "names {named}: {err}");
    }
    assert!(
        err.to_string().contains("sending it again will not help"),
        "{err}"
    );
    assert_eq!(c.get().await.unwrap(), before, "nothing changed");

    // The client's next report is numbered above both: applied.
    let v3 = c.send(&Report::new(1, flows(5..6, 0))).await.unwrap();
    assert!(v3.revision > before.version.revision);
    assert_eq!(c.get().await.unwrap().value, flows(5..6, 0));

    // A restarted process (another client: another node_epoch) replaces
    // the node's reports; the old one's are then refused.
    let restarted = client(&server.url, "rs409").await;
    assert_ne!(restarted.node_epoch(), c.node_epoch());
    restarted
        .send(&Report::new(1, flows(7..8, 0)))
        .await
        .unwrap();
    let err = c.send(&Report::new(1, flows(5..6, 1))).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Stale, "{err}");
    assert_eq!(c.get().await.unwrap().value, flows(7..8, 0));

    // An unnumbered client sends reports as given: without node_epoch and
    // seq, each is applied in arrival order, as in protocol v2.
    let plain = client_with(
        &server.url,
        Options {
            prefix: "rs409".into(),
            unnumbered: true,
            ..Options::default()
        },
    )
    .await;
    assert_eq!(plain.node_epoch(), None);
    plain.send(&Report::new(2, flows(9..10, 0))).await.unwrap();
    plain.send(&Report::new(2, flows(9..10, 1))).await.unwrap();
    // Its numbers are the report's own: the same seq twice is stale.
    let numbered = Report::new(3, flows(11..12, 0))
        .with_node_epoch(5)
        .with_seq(3);
    plain.send(&numbered).await.unwrap();
    let err = plain.send(&numbered).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Stale, "{err}");
}

/// Node `node`'s health of flows ids: rows, and one or two errors a flow,
/// newest first.
fn with_health(node: u64, ids: std::ops::Range<u32>, seed: i64) -> Report {
    Report::new(node, flows(ids.clone(), seed))
        .with_processed_rows(
            ids.clone()
                .map(|id| (id, 1000 * id as u64 + node))
                .collect(),
        )
        .with_last_errors(
            ids.map(|id| {
                let mut errs = vec![FlowError::new(
                    2_000 + seed + id as i64,
                    format!("node {node}: sink table {id} \"missing\"\t\u{e9}"),
                )];
                if id % 2 == 0 {
                    errs.push(FlowError::new(
                        1_000,
                        format!("node {node}: flow {id} slow"),
                    ));
                }
                (id, errs)
            })
            .collect(),
        )
}

#[tokio::test]
async fn get_stats_is_the_json_views_bytes_and_merges_the_nodes() {
    let server = NatsServer::start(&[]);
    let _w = Worker::start(&server.url, "rsstats", &[]).await;
    let c = client(&server.url, "rsstats").await;
    // Flows 2 and 10 (numeric order) on node 1; 10 and 11 on node 2, whose
    // errors of flow 10 are older and rows fewer for 10 than node 1's.
    let n1 = Report::new(1, flows(2..3, 0))
        .with_processed_rows(BTreeMap::from([(2, 7), (10, 500)]))
        .with_last_errors(BTreeMap::from([
            (2, vec![]),
            (
                10,
                vec![
                    FlowError::new(30, "n1 \"quoted\"\n\u{65e5}"),
                    FlowError::new(20, "n1 old"),
                ],
            ),
        ]));
    let n2 = Report::new(2, flows(10..12, 0))
        .with_processed_rows(BTreeMap::from([(10, 400), (11, u64::MAX)]))
        .with_last_errors(BTreeMap::from([(
            10,
            vec![FlowError::new(25, "n2 a"), FlowError::new(5, "n2 oldest")],
        )]));
    c.send(&n1).await.unwrap();
    let acked = c.send(&n2).await.unwrap();

    let stats = c.get_stats().await.unwrap();
    let json = c.get_stats_json().await.unwrap();
    assert_eq!(stats.version, json.version, "no report in between");
    assert!(stats.version.revision >= acked.revision);
    assert_eq!(stats.chunks, 1);
    assert_eq!(
        serde_json::to_string(&stats.view).unwrap(),
        std::str::from_utf8(&json.json).unwrap(),
        "the typed view is the JSON view, byte for byte"
    );
    let err = |time, node_id, message: &str| StatsError {
        time,
        node_id,
        message: message.into(),
    };
    let mut seed = flows(2..3, 0);
    seed.apply(&flows(10..12, 0).flows());
    assert_eq!(stats.view.value(), seed, "the aggregate");
    assert_eq!(stats.view.value(), c.get().await.unwrap().value);
    assert_eq!(
        stats.view.processed_rows,
        BTreeMap::from([(2, 7), (10, 500), (11, u64::MAX)]),
        "the most rows over the nodes"
    );
    assert_eq!(
        stats.view.last_errors,
        BTreeMap::from([(
            10,
            vec![
                err(30, 1, "n1 \"quoted\"\n\u{65e5}"),
                err(25, 2, "n2 a"),
                err(20, 1, "n1 old"),
            ]
        )]),
        "the 3 newest errors over the nodes, flow 2 without any"
    );
}

#[tokio::test]
async fn a_stats_view_past_the_max_payload_comes_in_chunks() {
    let server = NatsServer::with_max_payload(8 * 1024);
    let _w = Worker::start(&server.url, "rsstatsbig", &[]).await;
    let c = client(&server.url, "rsstatsbig").await;
    // About 150 bytes a flow in the view: 600 flows are 11 times the max
    // payload, in reports of 40 flows that each fit.
    let reports: Vec<Report> = (0..15u32)
        .map(|node| with_health(node as u64 + 1, node * 40..(node + 1) * 40, node as i64))
        .collect();
    for r in &reports {
        c.send(r).await.unwrap();
    }
    let err = c.get_stats_json().await.unwrap_err();
    assert_eq!(
        (err.kind(), err.code()),
        (ErrorKind::TooLarge, Some(413)),
        "{err}"
    );

    let stats = c.get_stats().await.unwrap();
    let max_payload = c.nats().server_info().max_payload;
    let size = stats.view.to_msgpack().len();
    assert!(size > 4 * max_payload, "a view of {size} bytes");
    assert!(
        stats.chunks >= size / max_payload,
        "{} chunks of {size} bytes",
        stats.chunks
    );
    assert_eq!(stats.view, common::view_of(&reports));
    assert_eq!(stats.view.last_errors.len(), 600);
}
