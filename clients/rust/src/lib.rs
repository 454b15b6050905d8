//! A client of the flowstate worker, for GreptimeDB flownodes and frontends
//! written in Rust: the wire contract of PROTOCOL.md on [`async_nats`].
//!
//! - A flownode sends its heartbeat [`Report`]: [`Client::publish`] without an
//!   acknowledgement, [`Client::send`] as a request that returns once the
//!   worker has applied it, with the state's [`Version`], or an [`Error`]
//!   whose [`ErrorKind`] and code say why it was refused (400, 507, 503).
//! - A frontend reads the aggregate: [`Client::get`] takes a snapshot of any
//!   size (chunked), [`Client::get_json`] the exact serde_json bytes
//!   GreptimeDB stores, and [`Client::watch`] follows the live state as a
//!   [`Stream`](futures_util::Stream) of [`State`]s, each with the flows that
//!   changed.
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
mod report;
mod value;
mod watch;

pub use client::{Client, DEFAULT_PREFIX, DEFAULT_TIMEOUT, Options, WatchMode};
pub use error::{Error, ErrorKind};
pub use get::{JsonSnapshot, Snapshot};
pub use report::{Delta, Report};
pub use value::{Flow, FlowId, FlowStateValue, Version};
pub use watch::{State, Watch};
