// Package flowstate is the value of the flow state and its stored form:
// what a flownode reports and what the aggregate holds (FlowStateValue, and
// Flow, the compact per-flow form that the encoders, the decoders and the
// state work on), the version that names a state (Version), and the bytes
// GreptimeDB's FlowStateManager (src/common/meta/src/key/flow/flow_state.rs
// in the GreptimeDB repository) keeps in its store: serde_json's form of
// FlowStateValue (AppendJSON, DecodeValue, and AppendValueFlows, the strict
// decoder that accepts exactly what serde_json accepts) under the keys
// StateKey and NodeKey.
//
// It is the leaf that the client, the codec and the worker share: it
// imports nothing but the standard library, so that a program that reads or
// writes the flow state links neither the worker's domain (package state)
// nor its stores.
package flowstate
