//! A client of the flowstate worker, for GreptimeDB flownodes and frontends
//! written in Rust: the wire contract of PROTOCOL.md on [`async_nats`].
//!
//! - A flownode sends its heartbeat [`Report`], with each flow's health
//!   (processed rows, last errors: protocol v3) if it has them:
//!   [`Client::publish`] without an acknowledgement, [`Client::send`] as a
//!   request that returns once the worker has applied it, with the state's
//!   [`Version`], or an [`Error`] whose [`ErrorKind`] and code say why it was
//!   refused (400, 409, 507, 503).
//! - The client numbers every report it sends (`node_epoch`, its creation
//!   time, and a `seq` one higher each time), so that a report delayed in
//!   the network never replaces a later one: the worker answers it 409,
//!   [`ErrorKind::Stale`]. A retry of a send that timed out is numbered
//!   anew. [`Options::unnumbered`] turns it off.
//! - A frontend reads the aggregate: [`Client::get`] takes a snapshot of any
//!   size (chunked), [`Client::get_json`] the exact serde_json bytes
//!   GreptimeDB stores, and [`Client::watch`] follows the live state as a
//!   [`Stream`](futures_util::Stream) of [`State`]s, each with the flows that
//!   changed. [`Client::get_stats`] reads the flow stats ([`StatsView`]: the
//!   aggregate and each flow's processed rows and newest errors over the
//!   nodes), of any size.
//!
//! The value is GreptimeDB's [`FlowStateValue`], with its serde derive.
//!
//! ```no_run
//! use std::collections::BTreeMap;
//! use flowstate_client::{Client, Options, Report};
//! use futures_util::StreamExt;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let nats = async_nats::connect("nats://127.0.0.1:4222").await?;
//! let client = Client::new(nats, Options::default())?;
//!
//! // A flownode: its FlowStat maps, as a report.
//! let state_size: BTreeMap<u32, usize> = BTreeMap::from([(1, 1024)]);
//! let last_exec_time_map: BTreeMap<u32, i64> = BTreeMap::from([(1, 1_700_000_000_000)]);
//! let version = client.send(&Report::new(7, (state_size, last_exec_time_map, BTreeMap::new()))).await?;
//! println!("applied at {version}");
//!
//! // A frontend: the state, then every change.
//! let mut watch = client.watch().await?;
//! while let Some(state) = watch.next().await {
//!     let state = state?;
//!     println!("{}: {}", state.version, state.value.to_json());
//! }
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

mod client;
mod error;
mod follow;
mod get;
mod health;
mod report;
mod value;
mod watch;

pub use client::{
    Client, DEFAULT_MAX_FLOWS, DEFAULT_MAX_GET_BYTES, DEFAULT_MAX_PENDING_BYTES, DEFAULT_PREFIX,
    DEFAULT_SNAPSHOT_INTERVAL, DEFAULT_TIMEOUT, Options, WatchMode,
};
pub use error::{Error, ErrorKind};
pub use get::{JsonSnapshot, Snapshot, StatsSnapshot};
pub use health::{
    FlowError, MAX_ERROR_MESSAGE, MAX_FLOW_ERRORS, StatsError, StatsView, repair_errors,
};
pub use report::{Delta, Report};
pub use value::{Flow, FlowId, FlowStateValue, Version};
pub use watch::{State, Watch};
