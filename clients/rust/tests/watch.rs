//! Client::watch against the real worker: across dropped deltas, a worker
//! restart, a slow consumer, resync deltas, and v1 workers followed on
//! <prefix>.state.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use async_nats::HeaderMap;
use flowstate_client::{Client, FlowStateValue, Options, Report, State, Version, Watch, WatchMode};
use futures_util::StreamExt;

use common::{NatsServer, WAIT_TIMEOUT, Worker, client, client_with};

/// The report of node in round: flows that move between nodes and rounds,
/// some of which leave.
fn report(node: u64, round: u64) -> Report {
    let mut v = FlowStateValue::default();
    for k in 0..20u64 {
        let id = ((node * 7 + round * 3 + k * 11) % 150) as u32;
        if !(round + k).is_multiple_of(5) {
            v.state_size
                .insert(id, (node * 1000 + round * 10 + k) as usize);
        }
        v.last_exec_time_map
            .insert(id, 1_700_000_000_000 + (round * 100 + node) as i64);
        if k % 3 == 0 {
            v.start_time_map.insert(id, 1_690_000_000_000 + node as i64);
        }
    }
    Report::new(node, v)
}

/// Sends rounds of acked reports from nodes, concurrently per node.
async fn churn(c: &Client, nodes: u64, rounds: u64) {
    let mut tasks = Vec::new();
    for node in 1..=nodes {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..rounds {
                c.send(&report(node, round)).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// The worker's current state as the bytes of its single-message get.
async fn get_bytes(c: &Client, prefix: &str) -> (Version, Vec<u8>) {
    let reply = c
        .nats()
        .request(format!("{prefix}.state.get"), Default::default())
        .await
        .unwrap();
    let h = reply.headers.as_ref().unwrap();
    let version = Version {
        epoch: h.get("Flow-State-Epoch").unwrap().as_str().to_string(),
        revision: h
            .get("Flow-State-Revision")
            .unwrap()
            .as_str()
            .parse()
            .unwrap(),
    };
    (version, reply.payload.to_vec())
}

/// Follows a watch, checking each state's changed flows against the value,
/// until a state of version want arrives; returns it and the states seen.
struct Follow {
    model: Option<FlowStateValue>,
    last: Option<Version>,
    states: usize,
    errors: usize,
    epoch_changes: usize,
}

impl Follow {
    fn new() -> Self {
        Follow {
            model: None,
            last: None,
            states: 0,
            errors: 0,
            epoch_changes: 0,
        }
    }

    fn check(&mut self, s: &State) {
        self.states += 1;
        self.last = Some(s.version.clone());
        if s.epoch_changed {
            self.epoch_changes += 1;
        }
        // State::changed brings the previous state to this one.
        let model = self.model.get_or_insert_with(FlowStateValue::default);
        model.apply(&s.changed);
        assert_eq!(model, &*s.value, "changed flows of {}", s.version);
    }

    async fn until(&mut self, w: &mut Watch, want: &Version) -> State {
        let deadline = Instant::now() + WAIT_TIMEOUT;
        loop {
            let item = tokio::time::timeout_at(deadline.into(), w.next())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "no state of {want} within {WAIT_TIMEOUT:?}; the last was {:?}",
                        self.last
                    )
                })
                .expect("the watch ended");
            match item {
                Ok(s) => {
                    self.check(&s);
                    if &s.version == want {
                        return s;
                    }
                }
                Err(_) => self.errors += 1,
            }
        }
    }
}

/// Relays a worker's subjects from one prefix to another: deltas (every
/// drop_every-th dropped), full updates, and gets (forwarded with the
/// caller's inbox, so the worker answers it directly; with v1, without
/// Flow-State-Chunks, as a worker that predates v2 would be asked).
struct Relay {
    dropping: Arc<AtomicBool>,
    dropped: Arc<AtomicUsize>,
    gets: Arc<AtomicUsize>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.tasks.iter().for_each(|t| t.abort());
    }
}

async fn relay(
    nats: &async_nats::Client,
    from: &str,
    to: &str,
    drop_every: usize,
    v1: bool,
) -> Relay {
    let dropping = Arc::new(AtomicBool::new(true));
    let dropped = Arc::new(AtomicUsize::new(0));
    let gets = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    let mut subjects = vec![("state", false)];
    if !v1 {
        subjects.push(("state.delta", true));
    }
    for (suffix, is_delta) in subjects {
        let mut sub = nats.subscribe(format!("{from}.{suffix}")).await.unwrap();
        let (nats, to, dropped, dropping) = (
            nats.clone(),
            format!("{to}.{suffix}"),
            dropped.clone(),
            dropping.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            while let Some(m) = sub.next().await {
                n += 1;
                if is_delta && n % drop_every == 0 && dropping.load(Ordering::SeqCst) {
                    dropped.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                nats.publish_with_headers(to.clone(), m.headers.unwrap_or_default(), m.payload)
                    .await
                    .unwrap();
            }
        }));
    }
    let mut sub = nats.subscribe(format!("{to}.state.get")).await.unwrap();
    let (nats2, from_get, gets2) = (nats.clone(), format!("{from}.state.get"), gets.clone());
    tasks.push(tokio::spawn(async move {
        while let Some(m) = sub.next().await {
            gets2.fetch_add(1, Ordering::Relaxed);
            let mut h = HeaderMap::new();
            for (name, values) in m.headers.iter().flat_map(|h| h.iter()) {
                if v1 && name.to_string() == "Flow-State-Chunks" {
                    continue;
                }
                for v in values {
                    h.append(name.clone(), v.clone());
                }
            }
            nats2
                .publish_with_reply_and_headers(from_get.clone(), m.reply.unwrap(), h, m.payload)
                .await
                .unwrap();
        }
    }));
    nats.flush().await.unwrap();
    Relay {
        dropping,
        dropped,
        gets,
        tasks,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_that_misses_deltas_resyncs_and_ends_on_the_get_byte_for_byte() {
    let server = NatsServer::start(&[]);
    let _w = Worker::start(&server.url, "rsdrop", &["--publish-interval", "5ms"]).await;
    let c = client(&server.url, "rsdrop").await;
    let r = relay(c.nats(), "rsdrop", "rsdropr", 7, false).await;
    let follower = client(&server.url, "rsdropr").await;
    let mut w = follower.watch().await.unwrap();

    let mut f = Follow::new();
    let first = f.until(&mut w, &c.get().await.unwrap().version).await;
    assert_eq!(
        first.changed.len(),
        first.value.flows().len(),
        "the first state: every flow"
    );
    // The relay drops every seventh delta: churn until it has dropped one
    // (a fast machine coalesces a whole churn into a few deltas).
    for _ in 0..50 {
        churn(&c, 10, 30).await;
        if r.dropped.load(Ordering::Relaxed) > 0 {
            break;
        }
    }
    // Core NATS may lose the last delta too, and any follower learns of a
    // loss from the next update: one more report, relayed, tells it.
    r.dropping.store(false, Ordering::SeqCst);
    c.send(&Report::new(
        1000,
        FlowStateValue::new([(999, 1)].into(), Default::default(), Default::default()),
    ))
    .await
    .unwrap();
    let (version, bytes) = get_bytes(&c, "rsdrop").await;
    let last = f.until(&mut w, &version).await;
    assert_eq!(
        last.value.to_msgpack(),
        bytes,
        "the follower's state is the get's, byte for byte"
    );
    assert!(
        r.dropped.load(Ordering::Relaxed) > 0,
        "no delta was dropped"
    );
    assert!(
        r.gets.load(Ordering::Relaxed) > 1,
        "no snapshot after a dropped delta"
    );
    assert_eq!(f.epoch_changes, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_follows_a_worker_restart_into_the_new_epoch() {
    let server = NatsServer::start(&[]);
    let mut worker = Worker::start(&server.url, "rsre", &["--publish-interval", "5ms"]).await;
    let c = client(&server.url, "rsre").await;
    let mut w = c.watch().await.unwrap();
    let mut f = Follow::new();
    let v = c.send(&report(1, 0)).await.unwrap();
    f.until(&mut w, &v).await;

    worker.kill();
    let _worker = Worker::start(&server.url, "rsre", &["--publish-interval", "5ms"]).await;
    let v2 = c.send(&report(2, 1)).await.unwrap();
    assert_ne!(
        v2.epoch, v.epoch,
        "a memory-backed worker starts a new epoch"
    );
    let s = f.until(&mut w, &v2).await;
    assert_eq!(f.epoch_changes, 1, "one state with epoch_changed");
    assert_eq!(
        *s.value,
        report(2, 1).value,
        "the new epoch holds only the new report"
    );
    churn(&c, 3, 5).await;
    let (version, bytes) = get_bytes(&c, "rsre").await;
    assert_eq!(f.until(&mut w, &version).await.value.to_msgpack(), bytes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_consumer_gets_the_newest_state_not_every_update() {
    let server = NatsServer::start(&[]);
    let _w = Worker::start(&server.url, "rsslow", &["--publish-interval", "0"]).await;
    let c = client(&server.url, "rsslow").await;
    let mut w = c.watch().await.unwrap();
    let mut f = Follow::new();
    f.until(&mut w, &c.get().await.unwrap().version).await;
    // 200 updates while the consumer does not read.
    churn(&c, 4, 50).await;
    let (version, bytes) = get_bytes(&c, "rsslow").await;
    let before = f.states;
    let last = f.until(&mut w, &version).await;
    assert_eq!(last.value.to_msgpack(), bytes);
    // The watch merges what the consumer has not taken: one state for the
    // updates its task applied during the stall, then one for each it
    // applies while the consumer reads (a few on a loaded machine). A watch
    // that queued every update would yield 200.
    assert!(
        f.states - before < 50,
        "{} states for 200 updates",
        f.states - before
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_takes_a_snapshot_on_a_resync_delta() {
    // Three reports of 400 new flows, each about 7 KB: the first goes out
    // at once, the next two are coalesced into one change of 800 flows that
    // does not fit in a delta of 8 KB.
    let server = NatsServer::with_max_payload(8 * 1024);
    let _w = Worker::start(&server.url, "rsresync", &["--publish-interval", "1s"]).await;
    let c = client(&server.url, "rsresync").await;
    let mut deltas = c.nats().subscribe("rsresync.state.delta").await.unwrap();
    let mut w = c.watch().await.unwrap();
    let mut f = Follow::new();
    f.until(&mut w, &c.get().await.unwrap().version).await;
    let mut want = FlowStateValue::default();
    let mut version = Version::default();
    for node in 0..3u32 {
        let ids = node * 400..(node + 1) * 400;
        let v = FlowStateValue::new(
            ids.clone().map(|id| (id, 5000)).collect(),
            ids.map(|id| (id, 1_700_000_000_000)).collect(),
            Default::default(),
        );
        want.apply(&v.flows());
        version = c.send(&Report::new(node as u64, v)).await.unwrap();
    }
    let s = f.until(&mut w, &version).await;
    assert_eq!(*s.value, want);
    let saw_resync = tokio::time::timeout(WAIT_TIMEOUT, async {
        while let Some(m) = deltas.next().await {
            if m.headers
                .as_ref()
                .and_then(|h| h.get("Flow-State-Resync"))
                .is_some()
            {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(saw_resync, Ok(true), "the worker published a resync delta");
}

async fn follow_v1(c: &Client, follower: &Client, prefix: &str) {
    let mut w = follower.watch().await.unwrap();
    let mut f = Follow::new();
    f.until(&mut w, &c.get().await.unwrap().version).await;
    churn(c, 5, 10).await;
    let (version, bytes) = get_bytes(c, prefix).await;
    assert_eq!(f.until(&mut w, &version).await.value.to_msgpack(), bytes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_mode_v1_follows_full_updates() {
    let server = NatsServer::start(&[]);
    let _w = Worker::start(
        &server.url,
        "rsv1",
        &["--state-updates", "full", "--publish-interval", "5ms"],
    )
    .await;
    let c = client(&server.url, "rsv1").await;
    let follower = client_with(
        &server.url,
        Options {
            prefix: "rsv1".into(),
            watch_mode: WatchMode::V1,
            ..Options::default()
        },
    )
    .await;
    follow_v1(&c, &follower, "rsv1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_mode_auto_follows_a_worker_that_answers_without_chunks_on_full_updates() {
    let server = NatsServer::start(&[]);
    let _w = Worker::start(&server.url, "rsold", &["--publish-interval", "5ms"]).await;
    let c = client(&server.url, "rsold").await;
    let r = relay(c.nats(), "rsold", "rsoldr", usize::MAX, true).await;
    let follower = client(&server.url, "rsoldr").await;
    follow_v1(&c, &follower, "rsold").await;
    assert!(
        r.gets.load(Ordering::Relaxed) >= 2,
        "a snapshot, then one after subscribing to full updates"
    );
}
