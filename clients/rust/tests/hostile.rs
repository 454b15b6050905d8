//! A peer allowed to publish on the state subjects, answering gets or
//! publishing updates with bytes of its own choosing: what the crate does
//! with what it sends, against the real worker and nats-server.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use bytes::Bytes;
use flowstate_client::{
    Client, DEFAULT_SNAPSHOT_INTERVAL, Delta, ErrorKind, Flow, FlowStateValue, Options, Report,
    State, Version, Watch,
};
use futures_util::StreamExt;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use common::{NatsServer, RawPeer, WAIT_TIMEOUT, Worker, client, client_with};

/// Waits for the watch's state of version want, skipping errors.
async fn until(w: &mut Watch, want: &Version) -> State {
    let deadline = Instant::now() + WAIT_TIMEOUT;
    let mut last = None;
    loop {
        let item = tokio::time::timeout_at(deadline.into(), w.next())
            .await
            .unwrap_or_else(|_| {
                panic!("no state of {want} within {WAIT_TIMEOUT:?}; the last was {last:?}")
            })
            .expect("the watch ended");
        if let Ok(s) = item {
            if &s.version == want {
                return s;
            }
            last = Some(s.version);
        }
    }
}

fn one_flow(id: u32, size: usize) -> FlowStateValue {
    FlowStateValue::new([(id, size)].into(), Default::default(), Default::default())
}

/// A delta as a peer that is not the worker would publish it: version v,
/// base, flow id at size.
fn forged_delta(v: &Version, base: u64, id: u32, size: usize) -> (HeaderMap, Bytes) {
    let mut h = HeaderMap::new();
    h.insert("Flow-State-Epoch", v.epoch.as_str());
    h.insert("Flow-State-Revision", v.revision.to_string().as_str());
    h.insert("Flow-State-Base-Revision", base.to_string().as_str());
    let d = Delta {
        base,
        flows: vec![Flow {
            id,
            state_size: Some(size),
            last_exec_time: None,
            start_time: None,
        }],
    };
    (h, Bytes::from(d.to_msgpack()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_revision_does_not_freeze_a_watch() {
    for ahead in [5, u64::MAX] {
        let server = NatsServer::start(&[]);
        let _w = Worker::start(&server.url, "forge", &[]).await;
        let c = client(&server.url, "forge").await;
        let first = c.send(&Report::new(1, one_flow(1, 10))).await.unwrap();
        let mut w = c.watch().await.unwrap();
        until(&mut w, &first).await;

        let forged = Version {
            epoch: first.epoch.clone(),
            revision: first.revision.saturating_add(ahead),
        };
        let (h, body) = forged_delta(&forged, first.revision, 1, 999_999);
        let forger = async_nats::connect(&server.url).await.unwrap();
        forger
            .publish_with_headers("forge.state.delta", h, body)
            .await
            .unwrap();
        forger.flush().await.unwrap();

        // The worker's next revision reaches the watch, with its value.
        let second = c.send(&Report::new(1, one_flow(1, 7))).await.unwrap();
        let s = until(&mut w, &second).await;
        assert_eq!(s.value.state_size.get(&1), Some(&7), "ahead {ahead}");
    }
}

/// Answers every get on `<prefix>.state.get` with answer, on a connection of
/// its own, and counts the gets.
async fn fake_worker<F, Fut>(url: &str, prefix: &str, answer: F) -> Arc<AtomicUsize>
where
    F: Fn(async_nats::Client, async_nats::Subject) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let nc = async_nats::connect(url).await.unwrap();
    let mut sub = nc.subscribe(format!("{prefix}.state.get")).await.unwrap();
    nc.flush().await.unwrap();
    let gets = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&gets);
    tokio::spawn(async move {
        while let Some(req) = sub.next().await {
            counted.fetch_add(1, Ordering::Relaxed);
            if let Some(reply) = req.reply {
                answer(nc.clone(), reply).await;
            }
        }
    });
    gets
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_of_chunks_past_the_bounds_fails_at_the_bound() {
    let server = NatsServer::start(&[]);
    // Valid chunks of 1,000 flows each, claiming 1,048,576 of them.
    fake_worker(&server.url, "fake", |nc, reply| async move {
        for i in 1..=200u32 {
            let from = (i - 1) * 1000;
            let v = FlowStateValue::new(
                (from..from + 1000).map(|id| (id, 1)).collect(),
                Default::default(),
                Default::default(),
            );
            let mut h = HeaderMap::new();
            h.insert("Flow-State-Epoch", "fake");
            h.insert("Flow-State-Revision", "1");
            h.insert("Content-Type", "application/msgpack");
            h.insert("Flow-State-Chunk", format!("{i}/1048576").as_str());
            if nc
                .publish_with_headers(reply.clone(), h, Bytes::from(v.to_msgpack()))
                .await
                .is_err()
            {
                return;
            }
        }
    })
    .await;
    for (what, opts) in [
        (
            "flows",
            Options {
                max_flows: 5000,
                ..Options::default()
            },
        ),
        (
            "bytes",
            Options {
                max_get_bytes: 64 << 10,
                ..Options::default()
            },
        ),
    ] {
        let c = client_with(
            &server.url,
            Options {
                prefix: "fake".into(),
                timeout: WAIT_TIMEOUT,
                ..opts
            },
        )
        .await;
        let e = c.get().await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Limit, "{what}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resync_storm_costs_the_worker_a_bounded_number_of_gets() {
    let server = NatsServer::start(&[]);
    let _w = Worker::start(&server.url, "storm", &[]).await;
    let c = client(&server.url, "storm").await;
    let first = c.send(&Report::new(1, one_flow(1, 10))).await.unwrap();
    // Every get, counted beside the worker.
    let counter = async_nats::connect(&server.url).await.unwrap();
    let mut gets_sub = counter.subscribe("storm.state.get").await.unwrap();
    counter.flush().await.unwrap();
    let gets = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&gets);
    let count_task = tokio::spawn(async move {
        while gets_sub.next().await.is_some() {
            counted.fetch_add(1, Ordering::Relaxed);
        }
    });

    let mut w = c.watch().await.unwrap();
    until(&mut w, &first).await;
    let (start, before) = (Instant::now(), gets.load(Ordering::Relaxed));

    // 2,000 resync deltas and 2,000 of a foreign epoch.
    let forger = async_nats::connect(&server.url).await.unwrap();
    let next = Version {
        epoch: first.epoch.clone(),
        revision: first.revision + 1,
    };
    for i in 0..2000u64 {
        let (mut h, body) = forged_delta(&next, first.revision, 1, 5);
        h.insert("Flow-State-Resync", "1");
        forger
            .publish_with_headers("storm.state.delta", h, body)
            .await
            .unwrap();
        let foreign = Version {
            epoch: "forged".into(),
            revision: i + 1,
        };
        let (h, body) = forged_delta(&foreign, 0, 1, 5);
        forger
            .publish_with_headers("storm.state.delta", h, body)
            .await
            .unwrap();
    }
    forger.flush().await.unwrap();
    let second = c.send(&Report::new(1, one_flow(1, 7))).await.unwrap();
    until(&mut w, &second).await;
    // The storm is behind the watch: the worker's next revision comes.
    let third = c.send(&Report::new(1, one_flow(1, 8))).await.unwrap();
    until(&mut w, &third).await;
    let elapsed = start.elapsed();
    count_task.abort();

    // At most one get per interval, and the first at once.
    let bound = (elapsed.as_millis() / DEFAULT_SNAPSHOT_INTERVAL.as_millis()) as usize + 2;
    let took = gets.load(Ordering::Relaxed) - before;
    assert!(
        took <= bound,
        "{took} gets over {elapsed:?} of a resync storm"
    );
}

/// The malformed headers: a lone CR in a value, a byte that is not UTF-8, a
/// line without a colon, a status line of another version.
const MALFORMED: [(&str, &[u8]); 4] = [
    (
        "lone CR",
        b"NATS/1.0\r\nFlow-State-Epoch: a\rb\r\nFlow-State-Revision: 5\r\n\r\n",
    ),
    (
        "not UTF-8",
        b"NATS/1.0\r\nFlow-State-Epoch: a\xffb\r\nFlow-State-Revision: 5\r\n\r\n",
    ),
    (
        "no colon",
        b"NATS/1.0\r\nFlow-State-Epoch\r\nFlow-State-Revision: 5\r\n\r\n",
    ),
    (
        "bad status line",
        b"NATS/9.9\r\nFlow-State-Epoch: a\r\nFlow-State-Revision: 5\r\n\r\n",
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_headers_on_updates_and_replies_end_no_connection() {
    let server = NatsServer::start(&[]);
    let _w = Worker::start(&server.url, "hdr", &[]).await;
    let c = client(&server.url, "hdr").await;
    // The fake worker of prefix "fakehdr" answers on the same connection as
    // c: what its replies do, they do to c.
    let fake = Client::new(
        c.nats().clone(),
        Options {
            prefix: "fakehdr".into(),
            timeout: Duration::from_secs(2),
            ..Options::default()
        },
    )
    .unwrap();
    let mut w = c.watch().await.unwrap();
    until(&mut w, &c.get().await.unwrap().version).await;
    let mut peer = RawPeer::connect(server.port).await;
    let mut replier = RawPeer::connect(server.port).await;
    replier
        .wr
        .write_all(b"SUB fakehdr.state.get 1\r\n")
        .await
        .unwrap();
    replier.ping().await;

    let mut node = 0u64;
    // The connection goes on: a report is acknowledged and the watch reaches
    // its revision.
    let mut recovers = async |what: &str, w: &mut Watch| {
        node += 1;
        let deadline = Instant::now() + WAIT_TIMEOUT;
        let v = loop {
            match c.send(&Report::new(node, one_flow(node as u32, 1))).await {
                Ok(v) => break v,
                Err(e) => assert!(
                    Instant::now() < deadline,
                    "{what}: the connection did not recover: {e}"
                ),
            }
        };
        until(w, &v).await;
    };
    for (what, hdr) in MALFORMED {
        // On an update the watch follows.
        let connects = c.nats().statistics().connects.load(Ordering::Relaxed);
        peer.hpub("hdr.state.delta", hdr, b"").await;
        recovers(what, &mut w).await;
        let on_update = c.nats().statistics().connects.load(Ordering::Relaxed) - connects;

        // On a get's reply.
        let connects = c.nats().statistics().connects.load(Ordering::Relaxed);
        let get = tokio::spawn({
            let fake = fake.clone();
            async move { fake.get().await }
        });
        let reply_to = loop {
            let mut line = String::new();
            tokio::time::timeout(WAIT_TIMEOUT, replier.rd.read_line(&mut line))
                .await
                .unwrap_or_else(|_| panic!("{what}: the client's get did not come"))
                .unwrap();
            if let Some(rest) = line.strip_prefix("HMSG ").or(line.strip_prefix("MSG ")) {
                let parts: Vec<&str> = rest.split_whitespace().collect();
                // The request's headers and body follow: skip them.
                let total: usize = parts.last().unwrap().parse().unwrap();
                let mut skip = vec![0u8; total + 2];
                tokio::io::AsyncReadExt::read_exact(&mut replier.rd, &mut skip)
                    .await
                    .unwrap();
                break parts[2].to_string();
            }
        };
        replier.hpub(&reply_to, hdr, b"\x80").await;
        let got = get.await.unwrap();
        recovers(what, &mut w).await;
        let on_reply = c.nats().statistics().connects.load(Ordering::Relaxed) - connects;

        let kind = got.as_ref().map(|s| &s.version).map_err(|e| e.kind());
        eprintln!(
            "{what}: {on_update} reconnects on an update; on a reply, {on_reply} reconnects and the get returned {kind:?}"
        );
        // The get ends on what came, not at its timeout: a reply the
        // library could parse is judged (lone CR: epoch "a b", an empty
        // body), one it could not cost the connection, and the get says so.
        let want = if on_reply > 0 {
            ErrorKind::Reconnected
        } else {
            ErrorKind::BadReply
        };
        assert_eq!(kind, Err(want), "{what}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_error_is_cut_escaped_and_its_code_checked() {
    let server = NatsServer::start(&[]);
    // A reason of 900 KB that starts with ANSI escapes and a BEL, and a code
    // that is not a number.
    fake_worker(&server.url, "fakeerr", |nc, reply| async move {
        let mut h = HeaderMap::new();
        h.insert("Nats-Service-Error-Code", "abc");
        let reason = format!("\x1b[31mred\x07{}", "x".repeat(900_000));
        h.insert("Nats-Service-Error", reason.as_str());
        let _ = nc.publish_with_headers(reply, h, Bytes::new()).await;
    })
    .await;
    let c = client(&server.url, "fakeerr").await;
    for (what, e) in [
        ("get", c.get().await.unwrap_err()),
        ("get_stats_json", c.get_stats_json().await.unwrap_err()),
    ] {
        assert_eq!(
            (e.kind(), e.code()),
            (ErrorKind::Service, Some(500)),
            "{what}: a code that is not a number is 500"
        );
        assert!(
            e.reason().starts_with("\\x1b[31mred\\x07"),
            "{what}: {:.40}",
            e.reason()
        );
        let shown = e.to_string();
        assert!(shown.len() < 1400, "{what}: {} bytes", shown.len());
        assert!(!shown.contains(['\x1b', '\x07']), "{what}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stats_view_past_the_contract_is_refused() {
    let server = NatsServer::start(&[]);
    for (prefix, errors, message_len) in [("manyerrs", 20_000, 1), ("longmsg", 1, 900_000)] {
        fake_worker(&server.url, prefix, move |nc, reply| async move {
            let error = flowstate_client::StatsError {
                time: 1,
                node_id: 1,
                message: "m".repeat(message_len),
            };
            let view = flowstate_client::StatsView {
                last_errors: [(1, vec![error; errors])].into(),
                ..Default::default()
            };
            let mut h = HeaderMap::new();
            h.insert("Flow-State-Epoch", "fake");
            h.insert("Flow-State-Revision", "1");
            h.insert("Content-Type", "application/msgpack");
            h.insert("Flow-State-Chunk", "1/1");
            let _ = nc
                .publish_with_headers(reply, h, Bytes::from(view.to_msgpack()))
                .await;
        })
        .await;
        let c = client(&server.url, prefix).await;
        let e = c.get_stats().await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadReply, "{prefix}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_gets_refuse_bytes_that_are_not_the_view() {
    let server = NatsServer::start(&[]);
    for (n, body) in [
        "not json",
        r#"{"state_size":{}}"#,
        r#"{"state_size":{},"last_exec_time_map":{}} trailing"#,
    ]
    .into_iter()
    .enumerate()
    {
        let prefix = format!("fakejson{n}");
        fake_worker(&server.url, &prefix, move |nc, reply| async move {
            let mut h = HeaderMap::new();
            h.insert("Flow-State-Epoch", "fake");
            h.insert("Flow-State-Revision", "1");
            h.insert("Content-Type", "application/json");
            let _ = nc
                .publish_with_headers(reply, h, Bytes::from_static(body.as_bytes()))
                .await;
        })
        .await;
        let c = client(&server.url, &prefix).await;
        let e = c.get_json().await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadReply, "get_json {body}: {e}");
        let e = c.get_stats_json().await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadReply, "get_stats_json {body}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_chunk_header_is_a_bad_reply_not_a_v1_answer() {
    let server = NatsServer::start(&[]);
    fake_worker(&server.url, "emptychunk", |nc, reply| async move {
        let mut h = HeaderMap::new();
        h.insert("Flow-State-Epoch", "fake");
        h.insert("Flow-State-Revision", "1");
        h.insert("Content-Type", "application/msgpack");
        h.insert("Flow-State-Chunk", "");
        let _ = nc
            .publish_with_headers(reply, h, Bytes::from(one_flow(1, 1).to_msgpack()))
            .await;
    })
    .await;
    let c = client(&server.url, "emptychunk").await;
    let e = c.get().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BadReply, "{e}");
}
