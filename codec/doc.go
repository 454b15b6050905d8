// Package codec is the msgpack wire format of the flow state worker: it
// decodes the heartbeat reports that flownodes send and encodes the
// aggregate that the worker publishes and the node view it answers
// (PROTOCOL.md, "Heartbeat report" and "Aggregate"). It knows msgpack and
// the domain types of package flowstate, not NATS. The JSON form of the
// aggregate is flowstate.AppendJSON.
//
// # Reports
//
// A report is a msgpack map with string field names:
//
//	node_id             uint64, required
//	node_epoch          uint64, optional, nil = absent
//	state_size          map flow id -> uint64, optional, nil = empty
//	last_exec_time_map  map flow id -> int64, optional, nil = empty
//	start_time_map      map flow id -> int64, optional, nil = empty
//	processed_rows      map flow id -> uint64, optional, nil = absent
//	last_errors         map flow id -> array of errors, optional, nil = absent
//	seq                 uint64, optional, nil = absent
//
// The last three are a flow's health and the report's number within its
// process (PROTOCOL.md v3). An error is a map with string keys: time (int64,
// unix ms) and message (1 to flowstate.MaxErrorMessage bytes of valid
// UTF-8), both required, other keys skipped; a flow has at most
// flowstate.MaxFlowErrors of them, newest first. Flow ids in these maps
// follow the rules of GreptimeDB's maps.
//
// A flow id is a msgpack integer of any width in 0..2^32-1, or the same
// number as a canonical decimal string ("7"; not "07", "+7", "" or " 7").
// Integers may take any msgpack encoding that holds their value. Unknown
// fields are skipped, whatever their type. Decoder.Decode rejects, with a
// *DecodeError that names the field and a Kind (a stable code for metrics),
// a body that is empty, not msgpack, truncated or followed by more bytes; a
// top level that is not a map; a field name that is not a string; a field
// named twice (unknown ones included); a missing node_id; a value of the
// wrong type or out of range; a bad flow id; a map naming the same flow
// twice (7 and "7" included); an error list or error that breaks the rules
// above (KindBadError, or KindOutOfRange for a time outside int64, with a
// Field such as last_errors[7][0].message that names the flow); and a
// report over the limits below. The decoded Report holds the union of the
// three maps as a list of flowstate.Flow sorted by id, and the health in
// Report.Health (flowstate.Health), its flows sorted by id and joined
// across processed_rows and last_errors, with flags for the fields that
// were present.
//
// # Limits
//
// Nesting: at most MaxDepth (32) levels, the report map being level 1.
// Flows: Decoder.MaxFlows distinct flow ids across all five maps (0: no
// limit); a map that claims more entries than the limit is rejected at its
// header, and otherwise the report is rejected at the first flow over the
// limit, before the rest is read (for GreptimeDB's maps; the flows of the two
// health maps are counted once the report is read). Unknown fields: Decoder.MaxUnknownFields
// (0: DefaultMaxUnknownFields, 1,024; less than 0: no limit); the report is
// rejected (KindTooManyUnknownFields) at the first field over the limit, so
// a body full of one-letter fields costs the work of the limit's fields,
// not a scan and a sort of millions of names. Lengths: no length read from the body is trusted
// further than the bytes that are left, so a header that claims 2^32
// entries costs nothing.
//
// Scratch memory: a Decoder keeps its buffers at the size of the reports it
// decodes; after an outlier, they are dropped once shrinkAfter (8) reports
// in a row have used less than a quarter of them (and more than 1,024
// items), so one large report does not hold its memory for the life of
// the worker, and a stream that mixes sizes does not reallocate.
//
// # Cost
//
// Decoding parses the bytes directly, without reflection or the msgpack
// library, and allocates nothing once a Decoder's buffers and the Report's
// Flows have grown to the size of the reports. A report with health fields
// allocates nothing either once its error messages have been seen: a
// Decoder keeps the strings of the messages it read (up to 4,096, then it
// starts over) and reuses them, since a node repeats its errors from one
// heartbeat to the next; one of the last messages it read is found by one
// comparison, without hashing it. Its time is linear in the
// flows of a report whose maps name their ids in ascending order (as
// AppendReport and serde's BTreeMap write them); maps in another order (as
// Go maps write them) are radix-sorted first. A map naming the same flows
// as the one before it is joined in place; other maps are merged in linear
// time. Checking that no unknown field is named twice costs nothing for up
// to 8 of them, and a hash each and a sort of the hashes beyond. The
// measured figures, against msgpack.Unmarshal, are in docs/performance.md.
//
// # Encoding
//
// AppendAggregate, AppendReport, AppendStats (the stats view of
// Flow-State-View: stats, of flowstate.MergeHealth's result) and
// AppendNodes (the node view) are the
// worker's msgpack writers: they write every integer in its shortest form
// (as msgpack/v5's EncodeUint and EncodeInt do), flow ids ascending, so
// that equal states give equal bytes, in one pass and with no allocation
// beyond growing the destination. AggregateLen, StatsLen and MinNodesLen
// tell their sizes without encoding; SplitAggregate and SplitStats cut a
// view into chunks of ascending, disjoint flow id ranges within a byte
// budget. DecodeAggregate reads an aggregate back, and DecodeStats a stats
// view (or a chunk of one), for clients and tests, as strictly as a report:
// types, ranges, flow ids and the rules of an error are checked, a flow named
// twice in a map is refused (a *DecodeError wrapping ErrInvalidAggregate or
// ErrInvalidStats); key order, integer widths and unknown fields are free.
package codec
