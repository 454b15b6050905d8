//! The value types: [`FlowStateValue`] (GreptimeDB's stored form), [`Flow`]
//! (one flow's entry across its three maps) and [`Version`].

use std::collections::{BTreeMap, HashSet};
use std::io::Cursor;

use serde::de::{self, DeserializeOwned, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind};

/// A flow id: GreptimeDB's flow ids are unsigned 32-bit.
///
/// ```
/// let id: flowstate_client::FlowId = 4_294_967_295;
/// # let _ = id;
/// ```
pub type FlowId = u32;

/// The state of flows, exactly as GreptimeDB declares it: per flow, the bytes
/// of state in memory, the last execution time and the first execution time
/// (both unix milliseconds). A flow may appear in any subset of the maps.
///
/// Its serde derive is GreptimeDB's, so [`serde_json::to_string`] writes the
/// bytes GreptimeDB stores under `__flow/state`, and
/// [`FlowStateValue::to_msgpack`] the aggregate's msgpack form.
///
/// ```
/// use std::collections::BTreeMap;
/// use flowstate_client::FlowStateValue;
///
/// let value = FlowStateValue::new(
///     BTreeMap::from([(1, 1024), (2, 2048)]),
///     BTreeMap::from([(1, 1_700_000_000_000)]),
///     BTreeMap::new(),
/// );
/// assert_eq!(
///     serde_json::to_string(&value).unwrap(),
///     r#"{"state_size":{"1":1024,"2":2048},"last_exec_time_map":{"1":1700000000000},"start_time_map":{}}"#
/// );
/// ```
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct FlowStateValue {
    /// For each flow, the bytes of the state in memory.
    pub state_size: BTreeMap<FlowId, usize>,
    /// For each flow, the last execution time in unix milliseconds.
    pub last_exec_time_map: BTreeMap<FlowId, i64>,
    /// For each flow, the time the flow first executed, in unix milliseconds.
    #[serde(default)]
    pub start_time_map: BTreeMap<FlowId, i64>,
}

impl FlowStateValue {
    /// Returns the value of the three maps.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use flowstate_client::FlowStateValue;
    ///
    /// let value = FlowStateValue::new(BTreeMap::from([(7, 512)]), BTreeMap::new(), BTreeMap::new());
    /// assert_eq!(value.state_size[&7], 512);
    /// ```
    pub fn new(
        state_size: BTreeMap<FlowId, usize>,
        last_exec_time_map: BTreeMap<FlowId, i64>,
        start_time_map: BTreeMap<FlowId, i64>,
    ) -> Self {
        Self {
            state_size,
            last_exec_time_map,
            start_time_map,
        }
    }

    /// Reports whether the value holds no flow.
    ///
    /// ```
    /// assert!(flowstate_client::FlowStateValue::default().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.state_size.is_empty()
            && self.last_exec_time_map.is_empty()
            && self.start_time_map.is_empty()
    }

    /// Returns the stored form: the bytes serde_json writes, as GreptimeDB
    /// stores them under `__flow/state` (field order as declared, no spaces,
    /// flow ids as strings in ascending numeric order).
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use flowstate_client::FlowStateValue;
    ///
    /// let value = FlowStateValue::new(BTreeMap::from([(2, 1), (10, 1)]), BTreeMap::new(), BTreeMap::new());
    /// assert_eq!(value.to_json(), r#"{"state_size":{"2":1,"10":1},"last_exec_time_map":{},"start_time_map":{}}"#);
    /// ```
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("maps of integers always serialize")
    }

    /// Returns the aggregate's msgpack form (PROTOCOL.md, Aggregate): a map
    /// with the string keys `state_size`, `last_exec_time_map`,
    /// `start_time_map` in that order, each a map with integer flow ids
    /// ascending, every integer in its shortest form. Equal values give equal
    /// bytes.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use flowstate_client::FlowStateValue;
    ///
    /// let value = FlowStateValue::new(BTreeMap::from([(1, 1024)]), BTreeMap::new(), BTreeMap::new());
    /// assert_eq!(FlowStateValue::from_msgpack(&value.to_msgpack()).unwrap(), value);
    /// ```
    pub fn to_msgpack(&self) -> Vec<u8> {
        // to_vec writes structs as arrays; the protocol's maps need the names.
        rmp_serde::to_vec_named(self).expect("maps of integers always serialize")
    }

    /// Decodes an aggregate in msgpack form, by the rules of a report
    /// (PROTOCOL.md): a map with string keys, the three maps absent or nil
    /// when empty, flow ids integers or canonical decimal strings (`"7"`) in
    /// any order, integer values in range, unknown fields skipped. A body
    /// that is not that, names a field or a flow of a map twice, or has
    /// bytes after it, returns an error of kind [`ErrorKind::BadReply`].
    ///
    /// ```
    /// use flowstate_client::FlowStateValue;
    ///
    /// assert!(FlowStateValue::from_msgpack(&[0xc1]).is_err());
    /// ```
    pub fn from_msgpack(data: &[u8]) -> Result<Self, Error> {
        let w: WireValue = decode_msgpack(data, "aggregate")?;
        Ok(FlowStateValue {
            state_size: w.state_size.0,
            last_exec_time_map: w.last_exec_time_map.0,
            start_time_map: w.start_time_map.0,
        })
    }

    /// Returns the flows, each with its entry across the three maps, sorted by
    /// id.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use flowstate_client::FlowStateValue;
    ///
    /// let value = FlowStateValue::new(BTreeMap::from([(1, 8)]), BTreeMap::from([(1, 5), (2, 6)]), BTreeMap::new());
    /// let flows = value.flows();
    /// assert_eq!((flows[0].id, flows[0].state_size, flows[0].last_exec_time), (1, Some(8), Some(5)));
    /// assert_eq!((flows[1].id, flows[1].state_size), (2, None));
    /// ```
    pub fn flows(&self) -> Vec<Flow> {
        let mut flows: BTreeMap<FlowId, Flow> = BTreeMap::new();
        for (&id, &v) in &self.state_size {
            flows.entry(id).or_insert_with(|| Flow::gone(id)).state_size = Some(v);
        }
        for (&id, &v) in &self.last_exec_time_map {
            flows
                .entry(id)
                .or_insert_with(|| Flow::gone(id))
                .last_exec_time = Some(v);
        }
        for (&id, &v) in &self.start_time_map {
            flows.entry(id).or_insert_with(|| Flow::gone(id)).start_time = Some(v);
        }
        flows.into_values().collect()
    }

    /// Returns the number of distinct flows the value names, in any map.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use flowstate_client::FlowStateValue;
    ///
    /// let value = FlowStateValue::new(BTreeMap::from([(1, 8)]), BTreeMap::from([(1, 5), (2, 6)]), BTreeMap::new());
    /// assert_eq!(value.len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        let in_size_or_last = |id: &FlowId| {
            self.state_size.contains_key(id) || self.last_exec_time_map.contains_key(id)
        };
        self.state_size.len()
            + self
                .last_exec_time_map
                .keys()
                .filter(|id| !self.state_size.contains_key(id))
                .count()
            + self
                .start_time_map
                .keys()
                .filter(|id| !in_size_or_last(id))
                .count()
    }

    /// Returns flow `id`'s entry: every field `None` when the value lacks it.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use flowstate_client::FlowStateValue;
    ///
    /// let value = FlowStateValue::new(BTreeMap::from([(1, 8)]), BTreeMap::new(), BTreeMap::new());
    /// assert_eq!(value.flow(1).state_size, Some(8));
    /// assert!(value.flow(2).is_gone());
    /// ```
    pub fn flow(&self, id: FlowId) -> Flow {
        Flow {
            id,
            state_size: self.state_size.get(&id).copied(),
            last_exec_time: self.last_exec_time_map.get(&id).copied(),
            start_time: self.start_time_map.get(&id).copied(),
        }
    }

    /// Sets each flow's entry: a field that is `None` is removed from its
    /// map, so a flow that [`Flow::is_gone`] leaves the value. This is how a
    /// delta update applies.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use flowstate_client::{Flow, FlowStateValue};
    ///
    /// let mut value = FlowStateValue::new(BTreeMap::from([(1, 8)]), BTreeMap::new(), BTreeMap::new());
    /// value.apply(&[Flow::gone(1)]);
    /// assert!(value.is_empty());
    /// ```
    pub fn apply<'a>(&mut self, flows: impl IntoIterator<Item = &'a Flow>) {
        for f in flows {
            set(&mut self.state_size, f.id, f.state_size);
            set(&mut self.last_exec_time_map, f.id, f.last_exec_time);
            set(&mut self.start_time_map, f.id, f.start_time);
        }
    }
}

fn set<T>(map: &mut BTreeMap<FlowId, T>, id: FlowId, v: Option<T>) {
    match v {
        Some(v) => {
            map.insert(id, v);
        }
        None => {
            map.remove(&id);
        }
    }
}

impl
    From<(
        BTreeMap<FlowId, usize>,
        BTreeMap<FlowId, i64>,
        BTreeMap<FlowId, i64>,
    )> for FlowStateValue
{
    /// Takes the three maps a GreptimeDB flownode keeps (`FlowStat`'s
    /// `state_size`, `last_exec_time_map`, `start_time_map`), in that order.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use flowstate_client::FlowStateValue;
    ///
    /// let value = FlowStateValue::from((BTreeMap::from([(1, 64)]), BTreeMap::new(), BTreeMap::new()));
    /// assert_eq!(value.state_size[&1], 64);
    /// ```
    fn from(
        (state_size, last_exec_time_map, start_time_map): (
            BTreeMap<FlowId, usize>,
            BTreeMap<FlowId, i64>,
            BTreeMap<FlowId, i64>,
        ),
    ) -> Self {
        Self::new(state_size, last_exec_time_map, start_time_map)
    }
}

/// One flow's entry across the three maps of a [`FlowStateValue`]: each
/// field is `None` when the flow is absent from that map.
///
/// ```
/// use flowstate_client::Flow;
///
/// let f = Flow { id: 7, state_size: Some(1024), last_exec_time: None, start_time: None };
/// assert!(!f.is_gone());
/// assert!(Flow::gone(7).is_gone());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Flow {
    /// The flow's id.
    pub id: FlowId,
    /// Its `state_size` entry.
    pub state_size: Option<usize>,
    /// Its `last_exec_time_map` entry.
    pub last_exec_time: Option<i64>,
    /// Its `start_time_map` entry.
    pub start_time: Option<i64>,
}

impl Flow {
    /// Returns the entry of a flow that is in none of the maps: in a delta
    /// or in [`State::changed`](crate::State::changed), a flow that left.
    ///
    /// ```
    /// assert_eq!(flowstate_client::Flow::gone(3).state_size, None);
    /// ```
    pub fn gone(id: FlowId) -> Self {
        Flow {
            id,
            state_size: None,
            last_exec_time: None,
            start_time: None,
        }
    }

    /// Reports whether the flow is in none of the maps.
    ///
    /// ```
    /// assert!(flowstate_client::Flow::gone(3).is_gone());
    /// ```
    pub fn is_gone(&self) -> bool {
        self.state_size.is_none() && self.last_exec_time.is_none() && self.start_time.is_none()
    }
}

/// The version of a state: its epoch (an opaque id of the state's lineage,
/// which changes whenever the state starts over empty) and its revision
/// (strictly increasing with every applied report within one epoch; 0 means
/// no report has been merged in the epoch).
///
/// ```
/// use flowstate_client::Version;
///
/// let v = Version { epoch: "e1".into(), revision: 42 };
/// assert_eq!(v.to_string(), "e1/42");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Version {
    /// The `Flow-State-Epoch` header.
    pub epoch: String,
    /// The `Flow-State-Revision` header.
    pub revision: u64,
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.epoch, self.revision)
    }
}

/// A flow map as a msgpack body may write it: nil or a map whose keys are
/// flow ids, integers or canonical decimal strings, each named once (and,
/// with ASCENDING, in ascending order).
#[derive(Debug, Default)]
pub(crate) struct FlowMap<V, const ASCENDING: bool>(pub(crate) BTreeMap<FlowId, V>);

impl<V: Serialize, const ASCENDING: bool> Serialize for FlowMap<V, ASCENDING> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de, V: Deserialize<'de>, const ASCENDING: bool> Deserialize<'de> for FlowMap<V, ASCENDING> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<V, const A: bool>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>, const A: bool> Visitor<'de> for Visit<V, A> {
            type Value = FlowMap<V, A>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of flow ids or nil")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(FlowMap(BTreeMap::new()))
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(FlowMap(BTreeMap::new()))
            }
            fn visit_map<M: MapAccess<'de>>(self, mut m: M) -> Result<Self::Value, M::Error> {
                let mut map = BTreeMap::new();
                while let Some(FlowKey(id)) = m.next_key()? {
                    if A && map.last_key_value().is_some_and(|(&last, _)| last >= id) {
                        return Err(de::Error::custom(format!(
                            "flow {id} out of order or named twice"
                        )));
                    }
                    if map.insert(id, m.next_value()?).is_some() {
                        return Err(de::Error::custom(format!("flow {id} named twice")));
                    }
                }
                Ok(FlowMap(map))
            }
        }
        d.deserialize_any(Visit::<V, ASCENDING>(std::marker::PhantomData))
    }
}

/// A flow id key: a msgpack integer or a canonical decimal string, within
/// uint32.
struct FlowKey(FlowId);

impl<'de> Deserialize<'de> for FlowKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl Visitor<'_> for Visit {
            type Value = FlowKey;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a flow id: a uint32 integer or canonical decimal string")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<FlowKey, E> {
                FlowId::try_from(v)
                    .map(FlowKey)
                    .map_err(|_| E::custom(format!("flow id {v} out of uint32 range")))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<FlowKey, E> {
                u64::try_from(v)
                    .map_err(|_| E::custom(format!("negative flow id {v}")))
                    .and_then(|v| self.visit_u64(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<FlowKey, E> {
                crate::get::canonical_uint(v).map(FlowKey).ok_or_else(|| {
                    E::custom(format!(
                        "flow id {v:.20?} is not a uint32 in canonical decimal"
                    ))
                })
            }
        }
        d.deserialize_any(Visit)
    }
}

/// An aggregate's msgpack body: string field names, each once; the three
/// maps absent or nil when empty; unknown fields skipped.
#[derive(Default)]
struct WireValue {
    state_size: FlowMap<usize, false>,
    last_exec_time_map: FlowMap<i64, false>,
    start_time_map: FlowMap<i64, false>,
}

impl<'de> Deserialize<'de> for WireValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> Visitor<'de> for Visit {
            type Value = WireValue;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an aggregate: a map with string field names")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut m: M) -> Result<WireValue, M::Error> {
                let mut w = WireValue::default();
                let mut seen = HashSet::new();
                while let Some(name) = m.next_key::<String>()? {
                    match name.as_str() {
                        "state_size" => w.state_size = m.next_value()?,
                        "last_exec_time_map" => w.last_exec_time_map = m.next_value()?,
                        "start_time_map" => w.start_time_map = m.next_value()?,
                        _ => {
                            m.next_value::<de::IgnoredAny>()?;
                        }
                    }
                    if !seen.insert(name) {
                        return Err(de::Error::custom("a field named twice"));
                    }
                }
                Ok(w)
            }
        }
        d.deserialize_map(Visit)
    }
}

/// How deep a msgpack item may nest, in rmp-serde's count (which counts the
/// innermost value too): a container may nest 32 deep, counting the body's
/// own map as level 1, as PROTOCOL.md allows a report's unknown fields.
const MAX_MSGPACK_DEPTH: usize = 33;

/// Decodes one msgpack item of type T that takes all of data.
pub(crate) fn decode_msgpack<T: DeserializeOwned>(data: &[u8], what: &str) -> Result<T, Error> {
    let mut de = rmp_serde::Deserializer::new(Cursor::new(data));
    // No form nests deeper than a few levels; an unknown field nested deeper
    // is refused before it takes the stack (a debug build overflows near
    // rmp-serde's default of 1,024).
    de.set_max_depth(MAX_MSGPACK_DEPTH);
    let v = T::deserialize(&mut de).map_err(|e| {
        Error::new(
            ErrorKind::BadReply,
            format!("{what} is not valid msgpack of its form"),
        )
        .with_source(e)
    })?;
    let used = de.position();
    if used != data.len() as u64 {
        return Err(Error::new(
            ErrorKind::BadReply,
            format!(
                "{what}: {} bytes after the msgpack item",
                data.len() as u64 - used
            ),
        ));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_nesting_in_an_unknown_field_is_refused_not_a_stack_overflow() {
        // {"state_size": {}, "last_exec_time_map": {}, "x": [[[...nil...]]]}.
        let value_with = |depth: usize| {
            let mut data = vec![0x83, 0xaa];
            data.extend(b"state_size\x80\xb2last_exec_time_map\x80\xa1x");
            data.extend(std::iter::repeat_n(0x91, depth));
            data.push(0xc0);
            data
        };
        let data = value_with(1000);
        let e = FlowStateValue::from_msgpack(&data).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadReply, "{e}");
        let cause = std::error::Error::source(&e).expect("the decoder's error is kept");
        assert!(cause.to_string().contains("depth"), "{e}");

        // As deep as the forms nest, and a few levels more, is fine.
        assert!(
            FlowStateValue::from_msgpack(&value_with(8))
                .unwrap()
                .is_empty()
        );
    }
}
