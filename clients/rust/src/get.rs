//! Gets: [`Snapshot`], single or chunked, and the JSON form.

use async_nats::{HeaderMap, Message};
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::time::{Instant, timeout_at};

use crate::client::{
    CONTENT_JSON, Client, H_ACCEPT, H_CHUNK, H_CHUNKS, H_CONTENT_TYPE, check_service_error, header,
    parse_version,
};
use crate::error::{Error, ErrorKind};
use crate::value::{FlowStateValue, Version};

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

/// The aggregate in its stored (serde_json) form, as [`Client::get_json`]
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
    /// Exactly the bytes GreptimeDB's serde_json writes for `FlowStateValue`.
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
        self.nats
            .publish_with_reply_and_headers(subject.clone(), inbox, headers, Bytes::new())
            .await
            .map_err(|e| nats_err("publish failed").with_source(e))?;
        let mut joiner = Joiner::default();
        loop {
            let msg = match timeout_at(deadline, sub.next()).await {
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
            if joiner.n == 0 && header(msg.headers.as_ref(), H_CHUNK).is_none() {
                let (version, value) = decode_state(&msg).map_err(|e| e.on(subject))?;
                return Ok(Snapshot {
                    version,
                    value,
                    chunks: 0,
                });
            }
            if joiner.add(&msg).map_err(|e| e.on(subject))? {
                return Ok(joiner.finish());
            }
        }
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
        let subject = &self.inner.get_subject;
        let mut headers = HeaderMap::new();
        headers.insert(H_ACCEPT, CONTENT_JSON);
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
        Ok(JsonSnapshot {
            version,
            json: reply.payload,
        })
    }
}

/// The media type of a Content-Type value, without parameters.
fn media_type(v: Option<&str>) -> &str {
    v.unwrap_or("").split(';').next().unwrap_or("").trim()
}

/// Decodes an aggregate message, by its Content-Type (msgpack when absent).
pub(crate) fn decode_state(msg: &Message) -> Result<(Version, FlowStateValue), Error> {
    let version = parse_version(msg.headers.as_ref())?;
    let value = if media_type(header(msg.headers.as_ref(), H_CONTENT_TYPE)) == CONTENT_JSON {
        serde_json::from_slice(&msg.payload).map_err(|e| {
            Error::new(ErrorKind::BadReply, "the JSON aggregate does not decode").with_source(e)
        })?
    } else {
        FlowStateValue::from_msgpack(&msg.payload)?
    };
    Ok((version, value))
}

/// Joins the chunks of one snapshot.
#[derive(Default)]
pub(crate) struct Joiner {
    version: Version,
    i: usize, // chunks received
    n: usize, // chunks announced
    value: FlowStateValue,
    last: Option<u32>, // the highest flow id so far
}

impl Joiner {
    /// Takes the next chunk and reports whether it was the last.
    pub(crate) fn add(&mut self, msg: &Message) -> Result<bool, Error> {
        let version = parse_version(msg.headers.as_ref())?;
        let chunk = header(msg.headers.as_ref(), H_CHUNK).unwrap_or("");
        let (i, n) = parse_chunk(chunk)?;
        let value = FlowStateValue::from_msgpack(&msg.payload).map_err(|e| {
            Error::new(
                ErrorKind::BadReply,
                format!("chunk {i}/{n}: {}", e.reason()),
            )
        })?;
        self.add_value(version, i, n, value)?;
        Ok(i == n)
    }

    /// Takes chunk i of n, of version, decoded.
    pub(crate) fn add_value(
        &mut self,
        version: Version,
        i: usize,
        n: usize,
        value: FlowStateValue,
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
        let flows = value.flows();
        if let (Some(first), Some(last)) = (flows.first(), self.last)
            && first.id <= last
        {
            return Err(Error::new(
                ErrorKind::BadReply,
                format!(
                    "chunk {i}/{n} starts at flow {}, at or below the previous chunk's {last}",
                    first.id
                ),
            ));
        }
        if let Some(f) = flows.last() {
            self.last = Some(f.id);
        }
        self.value.state_size.extend(value.state_size);
        self.value
            .last_exec_time_map
            .extend(value.last_exec_time_map);
        self.value.start_time_map.extend(value.start_time_map);
        self.i = i;
        Ok(())
    }

    /// Returns the joined snapshot.
    pub(crate) fn finish(self) -> Snapshot {
        Snapshot {
            version: self.version,
            value: self.value,
            chunks: self.n,
        }
    }
}

/// Parses a Flow-State-Chunk header, "<i>/<n>" with 1 <= i <= n.
fn parse_chunk(h: &str) -> Result<(usize, usize), Error> {
    let parsed = h
        .split_once('/')
        .and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?)));
    match parsed {
        Some((i, n)) if i >= 1 && i <= n && n <= MAX_CHUNKS => Ok((i, n)),
        _ => Err(Error::new(
            ErrorKind::BadReply,
            format!("{H_CHUNK} {h:?} is not <i>/<n>"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let s = j.finish();
        assert_eq!((s.chunks, s.value.state_size.len()), (2, 2));
    }
}
