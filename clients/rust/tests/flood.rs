//! A flood of 1 MB forged updates against a watch: the process's peak RSS
//! while it lasts, and how soon after it the watch reaches the worker's
//! revision. Alone in its test binary, so that the RSS is the watch's.
//! FLOWSTATE_FLOOD_SECS=10 floods for 10 s (the figures of
//! docs/clients.md); by default it sends 160 updates.

mod common;

use std::time::{Duration, Instant};

use flowstate_client::{FlowStateValue, Report, Version, Watch};
use futures_util::StreamExt;

use common::{NatsServer, RawPeer, WAIT_TIMEOUT, Worker, client};

/// The process's peak RSS in bytes since reset_peak (VmHWM).
fn peak_rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/self/status");
    let kb: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// Makes the peak RSS the RSS now.
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak RSS");
}

async fn until(w: &mut Watch, want: &Version) {
    let deadline = Instant::now() + WAIT_TIMEOUT;
    loop {
        let item = tokio::time::timeout_at(deadline.into(), w.next())
            .await
            .unwrap_or_else(|_| panic!("no state of {want} within {WAIT_TIMEOUT:?}"))
            .expect("the watch ended");
        if matches!(item, Ok(s) if &s.version == want) {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_forged_updates_stays_within_the_watch_s_byte_bound() {
    let secs: u64 = std::env::var("FLOWSTATE_FLOOD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let server = NatsServer::start(&[]);
    let _w = Worker::start(&server.url, "flood", &[]).await;
    let c = client(&server.url, "flood").await;
    let value = FlowStateValue::new([(1, 10)].into(), Default::default(), Default::default());
    let first = c.send(&Report::new(1, value)).await.unwrap();
    let mut w = c.watch().await.unwrap();
    until(&mut w, &first).await;

    // The flood comes from a raw connection, whose buffers are the
    // kernel's: the RSS is the watch's. Each update is of a foreign
    // epoch (every one calls for a snapshot), 1,000,000 bytes of body.
    reset_peak();
    let base = peak_rss();
    let mut peer = RawPeer::connect(server.port).await;
    let body = vec![0u8; 1_000_000];
    let start = Instant::now();
    let mut sent = 0u64;
    while (secs == 0 && sent < 160) || (secs > 0 && start.elapsed() < Duration::from_secs(secs)) {
        sent += 1;
        let hdr = format!(
            "NATS/1.0\r\nFlow-State-Epoch: forged\r\nFlow-State-Revision: {sent}\r\nFlow-State-Base-Revision: 0\r\n\r\n"
        );
        peer.hpub_nowait("flood.state.delta", hdr.as_bytes(), &body)
            .await;
    }
    peer.ping().await;
    let flood = start.elapsed();
    let end = Instant::now();

    let value = FlowStateValue::new([(1, 7)].into(), Default::default(), Default::default());
    let second = c.send(&Report::new(1, value)).await.unwrap();
    until(&mut w, &second).await;
    let caught_up = end.elapsed();
    let peak = peak_rss().saturating_sub(base);
    println!(
        "FIGURES rust flood: {sent} updates of 1 MB in {flood:.1?}; peak RSS {:.1} MB above the {:.1} MB before; the watch reached the worker's revision {caught_up:.2?} after the flood",
        peak as f64 / 1e6,
        base as f64 / 1e6
    );
    // 160 MB came: what stays is the bound, and a get's, the connection's
    // and the allocator's share, under 64 MB in all (the state is one flow).
    assert!(
        peak < 64 << 20,
        "peak RSS {peak} bytes above the watch's before the flood"
    );
}
