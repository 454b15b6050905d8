//! Gets: [`Snapshot`], single or chunked, the JSON form, and the stats
//! view ([`StatsSnapshot`]).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::{HeaderMap, Message};
use bytes::Bytes;
use futures_util::StreamExt;
use serde::de::DeserializeOwned;
use tokio::time::{Instant, timeout_at};

use crate::client::{
    CONTENT_JSON, Client, H_ACCEPT, H_CHUNK, H_CHUNKS, H_CONTENT_TYPE, H_VIEW, VIEW_STATS,
    check_service_error, header, parse_version,
};
use crate::error::{Error, ErrorKind};
use crate::health::StatsView;
use crate::value::{FlowId, FlowStateValue, Version, decode_msgpack};

/// How often a get looks whether the connection reconnected.
const RECONNECT_CHECK: Duration = Duration::from_millis(100);

/// The most chunks one snapshot may announce, so that a bad header cannot
/// keep a get reading forever (1,000,000 flows take about 36 chunks of 1 MB).
const MAX_CHUNKS: usize = 1 << 20;

/// The aggregate at one version, as a get returns it.
///
/// ```no_run
/// # async fn f(client: flowstate_client::Client) -> Result<(), flowstate_client::Error> {
/// let snapshot = client.get().await?;
/// println!("{} flows at {}", snapshot.value.flows().len(), snapshot.version);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Snapshot {
    /// The state's epoch and revision. Revision 0 means that no report has
    /// been merged in the epoch; the value is then empty.
    pub version: Version,
    /// The aggregate.
    pub value: FlowStateValue,
    /// The number of chunks the worker answered with; 0 when it answered in
    /// one message without `Flow-State-Chunk` (a worker that predates v2).
    pub chunks: usize,
}

/// The flow stats at one version, as [`Client::get_stats`] returns them.
///
/// ```no_run
/// # async fn f(client: flowstate_client::Client) -> Result<(), flowstate_client::Error> {
/// let stats = client.get_stats().await?;
/// for (flow, rows) in &stats.view.processed_rows {
///     println!("flow {flow}: {rows} rows at {}", stats.version);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StatsSnapshot {
    /// The state's epoch and revision.
    pub version: Version,
    /// The flow stats.
    pub view: StatsView,
    /// The number of chunks the worker answered with; 0 when it answered in
    /// one message without `Flow-State-Chunk` (a worker that predates v2).
    pub chunks: usize,
}

/// The aggregate in its stored (serde_json) form, as [`Client::get_json`]
/// returns it, or the stats view's JSON, as [`Client::get_stats_json`]
/// returns it.
///
/// ```no_run
/// # async fn f(client: flowstate_client::Client) -> Result<(), flowstate_client::Error> {
/// let stored = client.get_json().await?;
/// println!("{}", String::from_utf8_lossy(&stored.json));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonSnapshot {
    /// The state's epoch and revision.
    pub version: Version,
    /// Exactly the bytes GreptimeDB's serde_json writes for `FlowStateValue`;
    /// of the stats view, the bytes serde_json writes for [`StatsView`]. The
    /// bytes are the worker's as they came, checked to be one JSON object of
    /// that shape (else the get is [`ErrorKind::BadReply`]).
    pub json: Bytes,
}

impl Client {
    /// Returns the worker's current aggregate, of any size: it asks for a
    /// chunked snapshot (PROTOCOL.md v2) on a private inbox and joins the
    /// chunks, all of one version, in order, within [`Options::timeout`](crate::Options::timeout).
    /// A worker that predates v2 answers in one message, taken as is.
    /// A worker that cannot serve the state returns [`ErrorKind::Unavailable`]
    /// (503); without a worker the kind is [`ErrorKind::NoWorker`].
    ///
    /// ```no_run
    /// # async fn f(client: flowstate_client::Client) -> Result<(), flowstate_client::Error> {
    /// let snapshot = client.get().await?;
    /// for (flow, bytes) in &snapshot.value.state_size {
    ///     println!("flow {flow}: {bytes} bytes of state");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn get(&self) -> Result<Snapshot, Error> {
        let (version, value, chunks) = self.get_chunked(None).await?;
        Ok(Snapshot {
            version,
            value,
            chunks,
        })
    }

    /// Returns the worker's flow stats (protocol v3, the stats view:
    /// GreptimeDB's aggregate, and per flow the most rows any node processed
    /// and its newest errors over the nodes, each with its node), of any
    /// size: it asks for the view in chunks (`Flow-State-View: stats` with
    /// `Flow-State-Chunks: 1`) and joins them as [`Client::get`] does. The
    /// view's [`StatsView::to_json`] is, byte for byte, what
    /// [`Client::get_stats_json`] returns at the same revision. A worker that
    /// predates v3 ignores the view and answers GreptimeDB's value, which
    /// comes back without health. The errors are [`Client::get`]'s.
    ///
    /// ```no_run
    /// # async fn f(client: flowstate_client::Client) -> Result<(), flowstate_client::Error> {
    /// let stats = client.get_stats().await?;
    /// for (flow, errors) in &stats.view.last_errors {
    ///     let newest = &errors[0];
    ///     println!("flow {flow}: node {} at {}: {:?}", newest.node_id, newest.time, newest.message);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn get_stats(&self) -> Result<StatsSnapshot, Error> {
        let (version, view, chunks) = self.get_chunked(Some(VIEW_STATS)).await?;
        Ok(StatsSnapshot {
            version,
            view,
            chunks,
        })
    }

    /// Asks for a view in chunks on a private inbox and joins them.
    async fn get_chunked<T: Chunked>(
        &self,
        view: Option<&str>,
    ) -> Result<(Version, T, usize), Error> {
        let subject = &self.inner.get_subject;
        let deadline = Instant::now() + self.inner.timeout;
        let inbox = self.nats.new_inbox();
        let nats_err = |what: &str| Error::new(ErrorKind::Nats, what.to_string()).on(subject);
        // async-nats's request returns the first reply only: the chunks
        // arrive on an inbox of our own.
        let mut sub = self
            .nats
            .subscribe(inbox.clone())
            .await
            .map_err(|e| nats_err("subscribe to the reply inbox failed").with_source(e))?;
        let mut headers = HeaderMap::new();
        headers.insert(H_CHUNKS, "1");
        if let Some(v) = view {
            headers.insert(H_VIEW, v);
        }
        self.nats
            .publish_with_reply_and_headers(subject.clone(), inbox, headers, Bytes::new())
            .await
            .map_err(|e| nats_err("publish failed").with_source(e))?;
        let mut joiner = Joiner::<T>::default();
        let mut bytes = 0usize;
        // What the server sent while the connection was down is lost: a
        // reconnect ends the get at once.
        let connects = || self.nats.statistics().connects.load(Ordering::Relaxed);
        let connected = connects();
        let mut check = tokio::time::interval(RECONNECT_CHECK);
        loop {
            let next = tokio::select! {
                next = timeout_at(deadline, sub.next()) => next,
                _ = check.tick() => {
                    if connects() != connected {
                        return Err(Error::new(
                            ErrorKind::Reconnected,
                            "the connection reconnected during the get",
                        )
                        .on(subject));
                    }
                    continue;
                }
            };
            let msg = match next {
                Err(_) => {
                    let got = if joiner.n == 0 {
                        "no answer".to_string()
                    } else {
                        format!("{} of {} chunks", joiner.i, joiner.n)
                    };
                    return Err(Error::new(
                        ErrorKind::TimedOut,
                        format!("{got} within {:?}", self.inner.timeout),
                    )
                    .on(subject));
                }
                Ok(None) => return Err(nats_err("the connection closed during the get")),
                Ok(Some(msg)) => msg,
            };
            if msg.status == Some(async_nats::StatusCode::NO_RESPONDERS) {
                return Err(Error::new(ErrorKind::NoWorker, "no worker answered").on(subject));
            }
            check_service_error(subject, &msg)?;
            bytes = bytes.saturating_add(msg.payload.len());
            if bytes > self.inner.max_get_bytes {
                return Err(Error::new(
                    ErrorKind::Limit,
                    format!(
                        "the reply passed {} bytes (Options::max_get_bytes)",
                        self.inner.max_get_bytes
                    ),
                )
                .on(subject));
            }
            if joiner.n == 0 && header(msg.headers.as_ref(), H_CHUNK).is_none() {
                let (version, value): (Version, T) =
                    decode_body(&msg).map_err(|e| e.on(subject))?;
                self.check_flows(value.flow_count())?;
                return Ok((version, value, 0));
            }
            let last = joiner.add(&msg).map_err(|e| e.on(subject))?;
            self.check_flows(joiner.flows)?;
            if last {
                return Ok(joiner.finish());
            }
        }
    }

    /// Fails with [`ErrorKind::Limit`] when n flows are past
    /// [`Options::max_flows`](crate::Options::max_flows).
    fn check_flows(&self, n: usize) -> Result<(), Error> {
        if n > self.inner.max_flows {
            return Err(Error::new(
                ErrorKind::Limit,
                format!(
                    "the reply names {n} flows or more, past {} (Options::max_flows)",
                    self.inner.max_flows
                ),
            )
            .on(&self.inner.get_subject));
        }
        Ok(())
    }

    /// Returns the aggregate in the single-message form of a v1 get. A worker
    /// answers [`ErrorKind::TooLarge`] (413) when the aggregate exceeds the
    /// connection's max payload; [`Client::get`] reads any size.
    ///
    /// ```no_run
    /// # async fn f(client: flowstate_client::Client) -> Result<(), flowstate_client::Error> {
    /// let snapshot = client.get_single().await?;
    /// assert_eq!(snapshot.chunks, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn get_single(&self) -> Result<Snapshot, Error> {
        let subject = &self.inner.get_subject;
        let reply = self.request(subject, None, Bytes::new()).await?;
        let (version, value) = decode_state(&reply).map_err(|e| e.on(subject))?;
        Ok(Snapshot {
            version,
            value,
            chunks: 0,
        })
    }

    /// Returns the aggregate as the exact bytes GreptimeDB's serde_json
    /// writes for `FlowStateValue` (`Accept: application/json`), with its
    /// version: what GreptimeDB would store under `__flow/state`. Its errors
    /// are [`Client::get_single`]'s.
    ///
    /// ```no_run
    /// # async fn f(client: flowstate_client::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let stored = client.get_json().await?;
    /// let value: flowstate_client::FlowStateValue = serde_json::from_slice(&stored.json)?;
    /// # let _ = value;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn get_json(&self) -> Result<JsonSnapshot, Error> {
        self.get_json_view(None).await
    }

    /// Returns the flow stats (protocol v3, the stats view) as the JSON
    /// bytes PROTOCOL.md gives, with their version, in one message: a view
    /// past the connection's max payload is [`ErrorKind::TooLarge`] (413;
    /// [`Client::get_stats`] reads a view of any size, and its
    /// [`StatsView::to_json`] gives the same bytes). Its other errors are
    /// [`Client::get_single`]'s.
    ///
    /// ```no_run
    /// # async fn f(client: flowstate_client::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let stored = client.get_stats_json().await?;
    /// let view: flowstate_client::StatsView = serde_json::from_slice(&stored.json)?;
    /// # let _ = view;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn get_stats_json(&self) -> Result<JsonSnapshot, Error> {
        self.get_json_view(Some(VIEW_STATS)).await
    }

    /// Gets a view in JSON, in one message.
    async fn get_json_view(&self, view: Option<&str>) -> Result<JsonSnapshot, Error> {
        let subject = &self.inner.get_subject;
        let mut headers = HeaderMap::new();
        headers.insert(H_ACCEPT, CONTENT_JSON);
        if let Some(v) = view {
            headers.insert(H_VIEW, v);
        }
        let reply = self.request(subject, Some(headers), Bytes::new()).await?;
        let version = parse_version(reply.headers.as_ref()).map_err(|e| e.on(subject))?;
        let ct = media_type(header(reply.headers.as_ref(), H_CONTENT_TYPE));
        if ct != CONTENT_JSON {
            return Err(Error::new(
                ErrorKind::BadReply,
                format!("asked for {CONTENT_JSON}, got Content-Type {ct:?}"),
            )
            .on(subject));
        }
        // The bytes are passed on as they came, once they are checked to be
        // JSON of the view's shape.
        match view {
            None => {
                check_json::<FlowStateValue>(&reply.payload, &["state_size", "last_exec_time_map"])
            }
            Some(_) => check_json::<StatsView>(
                &reply.payload,
                &[
                    "state_size",
                    "last_exec_time_map",
                    "start_time_map",
                    "processed_rows",
                    "last_errors",
                ],
            ),
        }
        .map_err(|e| e.on(subject))?;
        Ok(JsonSnapshot {
            version,
            json: reply.payload,
        })
    }
}

/// Refuses data unless it is one JSON object of T's shape with each of the
/// keys `required`, checked as a chunk of T is.
fn check_json<T: Chunked>(data: &[u8], required: &[&str]) -> Result<(), Error> {
    let bad = |what: String| Error::new(ErrorKind::BadReply, what);
    let obj: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(data)
        .map_err(|e| bad(format!("the JSON {} does not decode", T::WHAT)).with_source(e))?;
    if let Some(k) = required.iter().find(|k| !obj.contains_key(**k)) {
        return Err(bad(format!("the JSON {} lacks {k:?}", T::WHAT)));
    }
    let v: T = serde_json::from_value(serde_json::Value::Object(obj))
        .map_err(|e| bad(format!("the JSON {} does not decode", T::WHAT)).with_source(e))?;
    v.check()
}

/// The media type of a Content-Type value, without parameters.
fn media_type(v: Option<&str>) -> &str {
    v.unwrap_or("").split(';').next().unwrap_or("").trim()
}

/// Decodes an aggregate message, by its Content-Type (msgpack when absent).
pub(crate) fn decode_state(msg: &Message) -> Result<(Version, FlowStateValue), Error> {
    decode_body(msg)
}

/// Decodes a message of a view, by its Content-Type (msgpack when absent).
fn decode_body<T: Chunked>(msg: &Message) -> Result<(Version, T), Error> {
    let version = parse_version(msg.headers.as_ref())?;
    let value = if media_type(header(msg.headers.as_ref(), H_CONTENT_TYPE)) == CONTENT_JSON {
        serde_json::from_slice(&msg.payload).map_err(|e| {
            Error::new(
                ErrorKind::BadReply,
                format!("the JSON {} does not decode", T::WHAT),
            )
            .with_source(e)
        })?
    } else {
        T::decode_msgpack_body(&msg.payload)?
    };
    value.check()?;
    Ok((version, value))
}

/// A view a get reads in chunks: each chunk a value of one range of flow ids.
pub(crate) trait Chunked: DeserializeOwned + Default {
    /// What the value is, for errors.
    const WHAT: &'static str;
    /// The lowest and highest flow id the value names, None when empty.
    fn id_range(&self) -> Option<(FlowId, FlowId)>;
    /// Adds the flows of a chunk whose ids are all above the value's.
    fn append(&mut self, chunk: Self);
    /// The number of distinct flows the value names.
    fn flow_count(&self) -> usize;
    /// Refuses a value that breaks PROTOCOL.md past what its form says.
    fn check(&self) -> Result<(), Error> {
        Ok(())
    }
    /// Decodes the value's msgpack form.
    fn decode_msgpack_body(data: &[u8]) -> Result<Self, Error> {
        decode_msgpack::<Self>(data, Self::WHAT)
    }
}

/// The number of distinct flow ids among keys.
fn distinct<'a>(keys: impl Iterator<Item = &'a FlowId>) -> usize {
    keys.collect::<std::collections::BTreeSet<_>>().len()
}

/// The lowest and highest flow id of maps, each as its first and last key.
fn id_range(ends: &[(Option<FlowId>, Option<FlowId>)]) -> Option<(FlowId, FlowId)> {
    Some((
        ends.iter().filter_map(|e| e.0).min()?,
        ends.iter().filter_map(|e| e.1).max()?,
    ))
}

/// The first and last key of m.
fn ends<V>(m: &BTreeMap<FlowId, V>) -> (Option<FlowId>, Option<FlowId>) {
    (m.keys().next().copied(), m.keys().next_back().copied())
}

impl Chunked for FlowStateValue {
    const WHAT: &'static str = "aggregate";
    fn decode_msgpack_body(data: &[u8]) -> Result<Self, Error> {
        FlowStateValue::from_msgpack(data)
    }

    fn id_range(&self) -> Option<(FlowId, FlowId)> {
        id_range(&[
            ends(&self.state_size),
            ends(&self.last_exec_time_map),
            ends(&self.start_time_map),
        ])
    }

    fn append(&mut self, chunk: Self) {
        self.state_size.extend(chunk.state_size);
        self.last_exec_time_map.extend(chunk.last_exec_time_map);
        self.start_time_map.extend(chunk.start_time_map);
    }

    fn flow_count(&self) -> usize {
        self.len()
    }
}

impl Chunked for StatsView {
    const WHAT: &'static str = "stats view";

    fn id_range(&self) -> Option<(FlowId, FlowId)> {
        id_range(&[
            ends(&self.state_size),
            ends(&self.last_exec_time_map),
            ends(&self.start_time_map),
            ends(&self.processed_rows),
            ends(&self.last_errors),
        ])
    }

    fn append(&mut self, chunk: Self) {
        self.state_size.extend(chunk.state_size);
        self.last_exec_time_map.extend(chunk.last_exec_time_map);
        self.start_time_map.extend(chunk.start_time_map);
        self.processed_rows.extend(chunk.processed_rows);
        self.last_errors.extend(chunk.last_errors);
    }

    /// At most [`MAX_FLOW_ERRORS`](crate::MAX_FLOW_ERRORS) errors a flow,
    /// each message 1 to [`MAX_ERROR_MESSAGE`](crate::MAX_ERROR_MESSAGE)
    /// bytes, as the worker writes them and the Go client checks.
    fn check(&self) -> Result<(), Error> {
        for (id, errors) in &self.last_errors {
            if errors.len() > crate::MAX_FLOW_ERRORS {
                return Err(Error::new(
                    ErrorKind::BadReply,
                    format!(
                        "flow {id} has {} errors, more than {}",
                        errors.len(),
                        crate::MAX_FLOW_ERRORS
                    ),
                ));
            }
            if let Some(e) = errors
                .iter()
                .find(|e| e.message.is_empty() || e.message.len() > crate::MAX_ERROR_MESSAGE)
            {
                return Err(Error::new(
                    ErrorKind::BadReply,
                    format!(
                        "flow {id} has an error message of {} bytes, not 1 to {}",
                        e.message.len(),
                        crate::MAX_ERROR_MESSAGE
                    ),
                ));
            }
        }
        Ok(())
    }

    fn flow_count(&self) -> usize {
        distinct(
            self.state_size
                .keys()
                .chain(self.last_exec_time_map.keys())
                .chain(self.start_time_map.keys())
                .chain(self.processed_rows.keys())
                .chain(self.last_errors.keys()),
        )
    }
}

/// Joins the chunks of one snapshot of a view.
#[derive(Default)]
pub(crate) struct Joiner<T> {
    version: Version,
    i: usize, // chunks received
    n: usize, // chunks announced
    value: T,
    last: Option<u32>, // the highest flow id so far
    /// The distinct flows of the chunks so far (their ranges do not
    /// overlap, so their counts add up).
    pub(crate) flows: usize,
}

impl<T: Chunked> Joiner<T> {
    /// Takes the next chunk and reports whether it was the last.
    pub(crate) fn add(&mut self, msg: &Message) -> Result<bool, Error> {
        let version = parse_version(msg.headers.as_ref())?;
        let chunk = header(msg.headers.as_ref(), H_CHUNK).unwrap_or("");
        let (i, n) = parse_chunk(chunk)?;
        let value: T = decode_msgpack(&msg.payload, T::WHAT)
            .map_err(|e| e.prefixed(&format!("chunk {i}/{n}")))?;
        value
            .check()
            .map_err(|e| e.prefixed(&format!("chunk {i}/{n}")))?;
        self.add_value(version, i, n, value)?;
        Ok(i == n)
    }

    /// Takes chunk i of n, of version, decoded.
    pub(crate) fn add_value(
        &mut self,
        version: Version,
        i: usize,
        n: usize,
        value: T,
    ) -> Result<(), Error> {
        if self.n == 0 {
            self.version = version.clone();
            self.n = n;
        }
        if version != self.version {
            return Err(Error::new(
                ErrorKind::BadReply,
                format!("chunk {i}/{n} is of {version}, chunk 1 of {}", self.version),
            ));
        }
        if n != self.n || i != self.i + 1 {
            return Err(Error::new(
                ErrorKind::BadReply,
                format!("chunk {i}/{n} after chunk {}/{}", self.i, self.n),
            ));
        }
        let range = value.id_range();
        if let (Some((first, _)), Some(last)) = (range, self.last)
            && first <= last
        {
            return Err(Error::new(
                ErrorKind::BadReply,
                format!(
                    "chunk {i}/{n} starts at flow {first}, at or below the previous chunk's {last}"
                ),
            ));
        }
        if let Some((_, hi)) = range {
            self.last = Some(hi);
        }
        self.flows += value.flow_count();
        self.value.append(value);
        self.i = i;
        Ok(())
    }

    /// Returns the joined value, its version and its number of chunks.
    pub(crate) fn finish(self) -> (Version, T, usize) {
        (self.version, self.value, self.n)
    }
}

/// Parses a Flow-State-Chunk header, "<i>/<n>": decimal digits without sign
/// or leading zero, 1 <= i <= n <= [`MAX_CHUNKS`].
fn parse_chunk(h: &str) -> Result<(usize, usize), Error> {
    let parsed = h
        .split_once('/')
        .and_then(|(a, b)| Some((canonical_uint(a)?, canonical_uint(b)?)));
    match parsed {
        Some((i, n)) if i >= 1 && i <= n && n <= MAX_CHUNKS => Ok((i, n)),
        _ => Err(Error::new(
            ErrorKind::BadReply,
            format!("{H_CHUNK} {h:?} is not <i>/<n>"),
        )),
    }
}

/// Parses s if it is decimal digits without a leading zero (or "0").
pub(crate) fn canonical_uint<T: std::str::FromStr>(s: &str) -> Option<T> {
    let digits = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits || (s.len() > 1 && s.starts_with('0')) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// testdata/vectors/hostile.json: replies a peer that is not the worker
    /// could send, read the same way by the Go client, this crate and the
    /// JavaScript client.
    #[test]
    fn hostile_vectors() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/vectors/hostile.json"
        );
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(v["max_chunks"].as_u64(), Some(MAX_CHUNKS as u64));
        for c in v["chunk_headers"].as_array().unwrap() {
            let h = c["header"].as_str().unwrap();
            let want = c["n"]
                .as_u64()
                .map(|n| (c["i"].as_u64().unwrap() as usize, n as usize));
            assert_eq!(parse_chunk(h).ok(), want, "{h:?}");
        }
        for c in v["error_codes"].as_array().unwrap() {
            let code = c["code"].as_str().unwrap();
            let mut h = HeaderMap::new();
            h.insert(crate::client::H_ERROR_CODE, code);
            let msg = Message {
                subject: "s".into(),
                reply: None,
                payload: Bytes::new(),
                headers: Some(h),
                status: None,
                description: None,
                length: 0,
            };
            let e = check_service_error("s", &msg).unwrap_err();
            assert_eq!(
                e.code(),
                c["want"].as_u64().map(|w| w as u16),
                "code {code:?}"
            );
        }
        for c in v["reasons"].as_array().unwrap() {
            let reason = c["reason"].as_str().unwrap();
            let reason = reason.repeat(c["repeat"].as_u64().unwrap_or(1) as usize);
            let e = Error::service("s", 500, &reason);
            assert_eq!(e.reason(), c["want"].as_str().unwrap(), "{:.40}", reason);
        }
    }

    /// The cases of one section of hostile.json.
    fn hostile_cases(section: &str) -> Vec<serde_json::Value> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/vectors/hostile.json"
        );
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let cases = v[section].as_array().unwrap().clone();
        assert!(!cases.is_empty(), "{section}");
        cases
    }

    /// A message of a case's headers (and extra ones) and msgpack body.
    fn hostile_msg(c: &serde_json::Value, extra: &[(&str, &str)]) -> Message {
        let mut h = HeaderMap::new();
        for (k, v) in c["headers"].as_object().into_iter().flatten() {
            h.insert(k.as_str(), v.as_str().unwrap());
        }
        for (k, v) in extra {
            h.insert(*k, *v);
        }
        let hex = c["msgpack"].as_str().unwrap_or("");
        let payload: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        Message {
            subject: "s".into(),
            reply: None,
            payload: payload.into(),
            headers: Some(h),
            status: None,
            description: None,
            length: 0,
        }
    }

    /// A case's flows: values as decimal strings, absent fields left out.
    fn hostile_flows(c: &serde_json::Value) -> Vec<crate::value::Flow> {
        let field = |f: &serde_json::Value, k: &str| f[k].as_str().map(|s| s.parse().unwrap());
        c["flows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| crate::value::Flow {
                id: f["id"].as_u64().unwrap() as FlowId,
                state_size: f["state_size"].as_str().map(|s| s.parse().unwrap()),
                last_exec_time: field(f, "last_exec_time"),
                start_time: field(f, "start_time"),
            })
            .collect()
    }

    /// The value of a case the vectors accept; for one they refuse (as
    /// bad_reply), checks that got is an error of that kind and returns None.
    fn accepted<T>(c: &serde_json::Value, got: Result<T, Error>) -> Option<T> {
        let name = c["name"].as_str().unwrap();
        match c["refused"].as_str() {
            Some(kind) => {
                assert_eq!(kind, "bad_reply", "{name}");
                let e = got.err().unwrap_or_else(|| panic!("{name}: accepted"));
                assert_eq!(e.kind(), ErrorKind::BadReply, "{name}");
                None
            }
            None => Some(got.unwrap_or_else(|e| panic!("{name}: {e}"))),
        }
    }

    #[test]
    fn hostile_body_vectors() {
        for c in hostile_cases("bodies") {
            let name = c["name"].as_str().unwrap();
            let got = decode_state(&hostile_msg(
                &c,
                &[("Flow-State-Epoch", "e1"), ("Flow-State-Revision", "1")],
            ));
            if let Some((_, value)) = accepted(&c, got) {
                assert_eq!(value.flows(), hostile_flows(&c), "{name}");
            }
        }
    }

    #[test]
    fn hostile_delta_vectors() {
        for c in hostile_cases("deltas") {
            let name = c["name"].as_str().unwrap();
            let msg = hostile_msg(&c, &[]);
            let got = crate::follow::read_delta(msg.headers.as_ref(), &msg.payload);
            match c["refused"].as_str() {
                Some(kind) => {
                    assert_eq!(kind, "snapshot", "{name}");
                    assert_eq!(got, None, "{name}");
                }
                None => {
                    let d = got.unwrap_or_else(|| panic!("{name}: refused"));
                    assert_eq!(d.base.to_string(), c["base"].as_str().unwrap(), "{name}");
                    assert_eq!(d.flows, hostile_flows(&c), "{name}");
                }
            }
        }
    }

    #[test]
    fn hostile_header_vectors() {
        for c in hostile_cases("headers") {
            let name = c["name"].as_str().unwrap();
            let got = parse_version(hostile_msg(&c, &[]).headers.as_ref());
            if let Some(v) = accepted(&c, got) {
                assert_eq!(v.epoch, c["epoch"].as_str().unwrap(), "{name}");
                assert_eq!(
                    v.revision.to_string(),
                    c["revision"].as_str().unwrap(),
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn parse_chunk_takes_i_of_n_and_refuses_the_rest() {
        assert_eq!(parse_chunk("1/1").unwrap(), (1, 1));
        assert_eq!(parse_chunk("3/7").unwrap(), (3, 7));
        for bad in ["", "0/1", "2/1", "1", "a/b", "1/2/3", "-1/2", "1/2000000"] {
            assert!(parse_chunk(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn joiner_refuses_chunks_out_of_order_of_another_version_or_overlapping() {
        let v = |rev| Version {
            epoch: "e".into(),
            revision: rev,
        };
        let one =
            |id: u32| FlowStateValue::new([(id, 1)].into(), Default::default(), Default::default());

        let mut j = Joiner::default();
        j.add_value(v(1), 1, 3, one(1)).unwrap();
        assert!(j.add_value(v(1), 3, 3, one(5)).is_err(), "skips chunk 2");

        let mut j = Joiner::default();
        j.add_value(v(1), 1, 2, one(1)).unwrap();
        assert!(j.add_value(v(2), 2, 2, one(5)).is_err(), "another revision");

        let mut j = Joiner::default();
        j.add_value(v(1), 1, 2, one(5)).unwrap();
        assert!(j.add_value(v(1), 2, 2, one(5)).is_err(), "overlaps");

        let mut j = Joiner::default();
        j.add_value(v(1), 1, 2, one(1)).unwrap();
        j.add_value(v(1), 2, 2, one(5)).unwrap();
        let (_, value, chunks) = j.finish();
        assert_eq!((chunks, value.state_size.len()), (2, 2));
    }

    #[test]
    fn a_stats_chunk_spans_the_ids_of_all_its_maps() {
        let v = Version {
            epoch: "e".into(),
            revision: 1,
        };
        let err = |id: u32| {
            vec![crate::StatsError {
                time: 1,
                node_id: 1,
                message: format!("flow {id}"),
            }]
        };
        // Chunk 1 ends at flow 9 in last_errors, past its state_size.
        let c1 = StatsView {
            state_size: [(1, 1)].into(),
            last_errors: [(9, err(9))].into(),
            ..StatsView::default()
        };
        let overlapping = StatsView {
            processed_rows: [(5, 1)].into(),
            ..StatsView::default()
        };
        let mut j = Joiner::default();
        j.add_value(v.clone(), 1, 2, c1.clone()).unwrap();
        let e = j.add_value(v.clone(), 2, 2, overlapping).unwrap_err();
        assert!(e.reason().contains("at or below"), "{e}");

        let c2 = StatsView {
            state_size: [(10, 2)].into(),
            processed_rows: [(12, 7)].into(),
            last_errors: [(12, err(12))].into(),
            ..StatsView::default()
        };
        let mut j = Joiner::default();
        j.add_value(v.clone(), 1, 2, c1).unwrap();
        j.add_value(v, 2, 2, c2).unwrap();
        let (_, view, chunks) = j.finish();
        assert_eq!(chunks, 2);
        assert_eq!(view.state_size, [(1, 1), (10, 2)].into());
        assert_eq!(view.processed_rows, [(12, 7)].into());
        assert_eq!(
            view.last_errors.keys().copied().collect::<Vec<_>>(),
            vec![9, 12]
        );
    }
}
