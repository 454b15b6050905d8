//! A frontend that follows the flow state: a snapshot, then every change,
//! with the flows that changed, as GreptimeDB's `flows` table would read
//! them; it prints the stored (serde_json) form of the last state.
//!
//!     cargo run --example frontend -- [NATS_URL [STATES]]
//!
//! NATS_URL defaults to $FLOWSTATE_NATS_URL, then nats://127.0.0.1:4222;
//! it stops after STATES states (default 20) or on Ctrl-C.

use flowstate_client::{Client, Options};
use futures_util::StreamExt;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .or_else(|| std::env::var("FLOWSTATE_NATS_URL").ok())
        .unwrap_or_else(|| "nats://127.0.0.1:4222".into());
    let states: usize = args.next().map_or(Ok(20), |a| a.parse())?;

    let nats = async_nats::connect(&url).await?;
    let client = Client::new(nats, Options::default())?;
    let mut watch = client.watch().await?;

    let mut last = None;
    let mut seen = 0;
    while seen < states {
        let item = tokio::select! {
            item = watch.next() => item,
            _ = tokio::signal::ctrl_c() => break,
        };
        let Some(item) = item else { break };
        let state = match item {
            Ok(s) => s,
            // A snapshot failed (no worker yet?): the watch retries by itself.
            Err(e) => {
                eprintln!("{e}");
                continue;
            }
        };
        seen += 1;
        if state.epoch_changed {
            println!("the state started over: epoch {}", state.version.epoch);
        }
        for flow in &state.changed {
            match flow.is_gone() {
                true => println!("{}: flow {} left", state.version, flow.id),
                false => println!(
                    "{}: flow {} state_size={:?} last_exec_time={:?} start_time={:?}",
                    state.version, flow.id, flow.state_size, flow.last_exec_time, flow.start_time
                ),
            }
        }
        last = Some(state);
    }
    if let Some(state) = last {
        println!("{}", state.value.to_json());
    }
    Ok(())
}
