//! A flownode's reporter: every second, the flow state a GreptimeDB flownode
//! keeps (its `FlowStat` maps) and each flow's health (rows processed, last
//! errors) go to the worker as an acknowledged report, numbered by the
//! client so that a report delayed in the network never replaces a later one.
//!
//!     cargo run --example flownode -- [NATS_URL [NODE_ID [ROUNDS]]]
//!
//! NATS_URL defaults to $FLOWSTATE_NATS_URL, then nats://127.0.0.1:4222;
//! NODE_ID to 1; ROUNDS to 10. Start a worker first (`make run` in the
//! repository starts one on an embedded NATS server).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flowstate_client::{Client, ErrorKind, FlowError, Options, Report};

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .or_else(|| std::env::var("FLOWSTATE_NATS_URL").ok())
        .unwrap_or_else(|| "nats://127.0.0.1:4222".into());
    let node_id: u64 = args.next().map_or(Ok(1), |a| a.parse())?;
    let rounds: u32 = args.next().map_or(Ok(10), |a| a.parse())?;

    let nats = async_nats::connect(&url).await?;
    let client = Client::new(nats, Options::default())?;
    let started = now_ms();

    for round in 0..rounds {
        // What a flownode's FlowStat holds: per flow, bytes of state, last
        // and first execution time (unix ms).
        let flows = [node_id as u32 * 100, node_id as u32 * 100 + 1];
        let state_size: BTreeMap<u32, usize> = flows
            .iter()
            .map(|&f| (f, 1024 * (round as usize + 1)))
            .collect();
        let last_exec_time_map: BTreeMap<u32, i64> = flows.iter().map(|&f| (f, now_ms())).collect();
        let start_time_map: BTreeMap<u32, i64> = flows.iter().map(|&f| (f, started)).collect();

        // Each flow's health since the process started: rows it processed,
        // and its newest errors, newest first (here, one on odd rounds).
        let processed_rows: BTreeMap<u32, u64> = flows
            .iter()
            .map(|&f| (f, 1000 * (round as u64 + 1)))
            .collect();
        let last_errors: BTreeMap<u32, Vec<FlowError>> = flows
            .iter()
            .map(|&f| {
                let errs = if round % 2 == 1 {
                    vec![FlowError::new(
                        now_ms(),
                        format!("flow {f}: sink table missing"),
                    )]
                } else {
                    vec![]
                };
                (f, errs)
            })
            .collect();

        // The client gives the report its node_epoch (its creation time)
        // and the next seq.
        let report = Report::new(node_id, (state_size, last_exec_time_map, start_time_map))
            .with_processed_rows(processed_rows)
            .with_last_errors(last_errors);
        match client.send(&report).await {
            Ok(v) => println!(
                "node {node_id}: report {round} applied at revision {} (epoch {})",
                v.revision, v.epoch
            ),
            // The worker is full or its store is down, or holds a later
            // report of this node (one this process sent, or a process
            // started after it): the next heartbeat, numbered anew, tries
            // again, as GreptimeDB's heartbeats do.
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::Capacity
                        | ErrorKind::Stale
                        | ErrorKind::Unavailable
                        | ErrorKind::TimedOut
                        | ErrorKind::NoWorker
                ) =>
            {
                eprintln!("node {node_id}: {e}")
            }
            Err(e) => return Err(e.into()),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(())
}
