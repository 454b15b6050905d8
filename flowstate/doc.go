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
// A flow's health (PROTOCOL.md v3) is kept beside GreptimeDB's value, never
// in it: Health is a node's processed rows and last errors per flow
// (FlowHealth; at most MaxFlowErrors errors of 1 to MaxErrorMessage bytes
// of UTF-8 each, newest first), its report's seq, and the node_epoch values
// the node moved away from (at most MaxRetiredEpochs, oldest first).
// AppendNodeJSON writes a node's stored value: GreptimeDB's JSON, byte for
// byte, when the report has no v3 field (processed_rows, last_errors, seq),
// and otherwise that object followed by processed_rows, last_errors,
// node_epoch, seq and retired_epochs, each when present, so that GreptimeDB
// still reads it as the node's FlowStateValue. DecodeNodeHealth reads those
// fields back and refuses (ErrInvalidValue) a value whose v3 fields break
// the rules of a report's. MergeHealth merges the health of every node
// into the stats view (FlowStats: per flow the most rows any node reports
// and the MaxFlowErrors newest errors over all nodes, ties by node id then
// the node's order), and AppendStatsJSON writes its JSON form. Messages are
// escaped as serde_json escapes a string (AppendJSONString).
//
// It is the leaf that the client, the codec and the worker share: it
// imports nothing but the standard library, so that a program that reads or
// writes the flow state links neither the worker's domain (package state)
// nor its stores.
package flowstate
