package protocol

// Header names.
const (
	HeaderRevision     = "Flow-State-Revision"      // decimal uint64
	HeaderEpoch        = "Flow-State-Epoch"         // opaque
	HeaderBaseRevision = "Flow-State-Base-Revision" // a delta's base (v2)
	HeaderResync       = "Flow-State-Resync"        // "1": a delta that says "take a snapshot" (v2)
	HeaderChunks       = "Flow-State-Chunks"        // "1" on a get: chunks welcome (v2)
	HeaderChunk        = "Flow-State-Chunk"         // "<i>/<n>" on a chunk (v2)
	HeaderView         = "Flow-State-View"          // on a get: ViewSeed or ViewStats (v3)
	HeaderContentType  = "Content-Type"
	HeaderAccept       = "Accept"

	// The NATS micro service error headers of a failed request.
	HeaderError     = "Nats-Service-Error"      // one-line reason
	HeaderErrorCode = "Nats-Service-Error-Code" // decimal code, below

	// Headers of a dead-lettered report.
	HeaderRejectKind    = "Flow-State-Reject-Reason"  // the counted reason, e.g. bad_flow_id
	HeaderRejectError   = "Flow-State-Reject-Error"   // the one-line description
	HeaderRejectSubject = "Flow-State-Reject-Subject" // the subject the report came on
)

// Content types.
const (
	ContentTypeMsgpack = "application/msgpack"
	ContentTypeJSON    = "application/json"
)

// Views a get may ask for with HeaderView (v3). No header means ViewSeed;
// any other value is answered CodeBadRequest.
const (
	ViewSeed  = "seed"  // GreptimeDB's FlowStateValue, as in v1 and v2
	ViewStats = "stats" // the flow stats: GreptimeDB's maps, processed_rows and last_errors
)

// Error codes of a failed request.
const (
	CodeBadRequest  = 400 // bad input; nothing changed
	CodeStale       = 409 // a stale report (v3): a later one of its process is held; nothing changed
	CodeTooLarge    = 413 // a v1 get of an aggregate over the max payload
	CodeInternal    = 500 // anything else
	CodeUnavailable = 503 // not ready, the store unavailable, or overloaded
	CodeCapacity    = 507 // a report refused by the capacity limits; nothing changed
)
