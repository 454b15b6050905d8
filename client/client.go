package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/flowstate"
	"github.com/flowstate-io/flowstate/protocol"
)

// DefaultPrefix is the subject prefix of Options, as the worker's default.
const DefaultPrefix = protocol.DefaultPrefix

// DefaultTimeout bounds each request when Options.Timeout is zero.
const DefaultTimeout = 5 * time.Second

// Options configure a Client. The zero value takes the defaults.
type Options struct {
	// Prefix is the subject prefix of the worker; "" means DefaultPrefix.
	Prefix string
	// Timeout bounds each request (a get, an acknowledged report), within
	// the deadline of the context passed, if any; 0 means DefaultTimeout.
	Timeout time.Duration
	// WatchMode says how Watch follows the state: WatchAuto (the zero
	// value) follows deltas when the worker speaks v2, WatchV1 and WatchV2
	// force one way.
	WatchMode WatchMode
	// Unnumbered turns off the numbering of reports: Send and Publish then
	// send each report exactly as given, with no node_epoch when its
	// NodeEpoch is 0 and no seq unless its Health has one, and the worker
	// applies each in arrival order, as in protocol v2. By default (false)
	// the Client numbers every report it sends (see Report), so that a
	// report delayed in the network never replaces a later one.
	Unnumbered bool
	// Logger receives the one line a Client logs: the first time it
	// repairs a report's error list (RepairErrors). nil means
	// slog.Default().
	Logger *slog.Logger

	// MaxFlows bounds the flows a get returns and a watch holds; 0 means
	// DefaultMaxFlows (the worker's default --max-total-flows). A get
	// whose reply names more fails with an error wrapping ErrLimit; a
	// watch whose updates would take it past drops them and takes a
	// snapshot.
	MaxFlows int
	// MaxGetBytes bounds the bytes of one get's reply, its chunks
	// together; 0 means DefaultMaxGetBytes. A reply past it fails with an
	// error wrapping ErrLimit.
	MaxGetBytes int
	// MaxPendingBytes bounds the updates a watch keeps waiting while its
	// loop body runs or a snapshot is taken; 0 means
	// DefaultMaxPendingBytes. Past it, the watch drops them all and takes
	// a snapshot (and says so once, with an error wrapping ErrLimit).
	MaxPendingBytes int
	// SnapshotInterval is the least time between two snapshots of one
	// watch, so that a storm of updates calling for snapshots costs the
	// worker a bounded number of gets; 0 means DefaultSnapshotInterval.
	SnapshotInterval time.Duration
}

// The defaults of the bounds of Options.
const (
	// DefaultMaxFlows is the worker's default --max-total-flows.
	DefaultMaxFlows = 100_000
	// DefaultMaxGetBytes holds a stats view of DefaultMaxFlows flows with
	// the worker's default --max-error-bytes (16 MiB) of errors.
	DefaultMaxGetBytes = 64 << 20
	// DefaultMaxPendingBytes is four updates of the server's default max
	// payload (1 MB).
	DefaultMaxPendingBytes = 4 << 20
	// DefaultSnapshotInterval lets a watch take at most two snapshots a
	// second.
	DefaultSnapshotInterval = 500 * time.Millisecond
)

// WatchMode says how Watch follows the state.
type WatchMode int

// The modes of Watch.
const (
	// WatchAuto takes a chunked snapshot and follows <prefix>.state.delta
	// when the worker answers in chunks (it speaks v2), <prefix>.state
	// otherwise. A v2 worker run with --state-updates full publishes no
	// deltas: watch it with WatchV1.
	WatchAuto WatchMode = iota
	// WatchV1 follows the full updates on <prefix>.state.
	WatchV1
	// WatchV2 follows the delta updates on <prefix>.state.delta.
	WatchV2
)

// Validate reports the first invalid option.
func (o Options) Validate() error {
	if err := protocol.ValidatePrefix(o.Prefix); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if o.WatchMode < WatchAuto || o.WatchMode > WatchV2 {
		return fmt.Errorf("client: watch mode %d is not WatchAuto, WatchV1 or WatchV2", o.WatchMode)
	}
	if o.Timeout < 0 {
		return fmt.Errorf("client: timeout %v is negative", o.Timeout)
	}
	if o.MaxFlows < 0 || o.MaxGetBytes < 0 || o.MaxPendingBytes < 0 {
		return fmt.Errorf("client: MaxFlows %d, MaxGetBytes %d, MaxPendingBytes %d: a bound is negative", o.MaxFlows, o.MaxGetBytes, o.MaxPendingBytes)
	}
	if o.SnapshotInterval < 0 {
		return fmt.Errorf("client: snapshot interval %v is negative", o.SnapshotInterval)
	}
	return nil
}

// Client sends reports to and reads the state of the worker serving one
// subject prefix. It is safe for concurrent use.
type Client struct {
	nc        *nats.Conn
	timeout   time.Duration
	watchMode WatchMode
	// The bounds of Options, defaults applied.
	maxFlows, maxGetBytes, maxPendingBytes int
	snapshotInterval                       time.Duration

	// epoch is the node_epoch of the reports the Client numbers, 0 when
	// unnumbered; seq the seq of the report it numbered last.
	epoch uint64
	seq   atomic.Uint64

	hbPrefix     string // <prefix>.heartbeat.
	stateSubject string // <prefix>.state
	deltaSubject string // <prefix>.state.delta
	getSubject   string // <prefix>.state.get

	log          *slog.Logger
	repairLogged atomic.Bool // the first repair of an error list was logged
}

// New returns a Client that talks over nc, which stays the caller's to
// close. It does no I/O.
func New(nc *nats.Conn, opts Options) (*Client, error) {
	if nc == nil {
		return nil, errors.New("client: a connection is required")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	c := &Client{
		nc:               nc,
		timeout:          opts.Timeout,
		watchMode:        opts.WatchMode,
		maxFlows:         orDefault(opts.MaxFlows, DefaultMaxFlows),
		maxGetBytes:      orDefault(opts.MaxGetBytes, DefaultMaxGetBytes),
		maxPendingBytes:  orDefault(opts.MaxPendingBytes, DefaultMaxPendingBytes),
		snapshotInterval: orDefault(opts.SnapshotInterval, DefaultSnapshotInterval),
		deltaSubject:     opts.Prefix + ".state.delta",
		hbPrefix:         opts.Prefix + ".heartbeat.",
		stateSubject:     opts.Prefix + ".state",
		getSubject:       opts.Prefix + ".state.get",
		log:              opts.Logger,
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if !opts.Unnumbered {
		c.epoch = newEpoch(time.Now())
	}
	return c, nil
}

// orDefault returns v, or def when v is zero.
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// lastEpoch is the node_epoch of the Client of this process created last.
var lastEpoch atomic.Uint64

// newEpoch returns the node_epoch of a new Client: now in unix ms, or one
// more than the previous Client's when that is not later, so that no two
// Clients of one process share an epoch.
func newEpoch(now time.Time) uint64 {
	ms := uint64(max(now.UnixMilli(), 1))
	for {
		last := lastEpoch.Load()
		e := max(ms, last+1)
		if lastEpoch.CompareAndSwap(last, e) {
			return e
		}
	}
}

// NodeEpoch returns the node_epoch the Client gives the reports it numbers
// (its creation time in unix ms), or 0 for a Client with
// Options.Unnumbered.
func (c *Client) NodeEpoch() uint64 { return c.epoch }

// HeartbeatSubject returns the subject node nodeID reports on.
func (c *Client) HeartbeatSubject(nodeID uint64) string {
	return c.hbPrefix + strconv.FormatUint(nodeID, 10)
}

// request sends msg as a request, bounded by ctx and the client's timeout,
// and returns the reply. A reply with the service error headers returns a
// *ServiceError; no worker listening returns an error wrapping ErrNoWorker.
func (c *Client) request(ctx context.Context, msg *nats.Msg) (*nats.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	reply, err := c.nc.RequestMsgWithContext(ctx, msg)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("%w on %s (%w)", ErrNoWorker, msg.Subject, err)
	case err != nil:
		return nil, fmt.Errorf("client: %s: %w", msg.Subject, err)
	}
	if code := reply.Header.Get(protocol.HeaderErrorCode); code != "" {
		return nil, newServiceError(msg.Subject, code, reply.Header.Get(protocol.HeaderError))
	}
	return reply, nil
}

// parseVersion reads the Flow-State-Epoch (1 to 64 printable ASCII
// characters) and Flow-State-Revision (a decimal uint64 without sign or
// leading zero) headers; anything else is a malformed reply.
func parseVersion(h nats.Header) (flowstate.Version, error) {
	epoch := h.Get(protocol.HeaderEpoch)
	rev := h.Get(protocol.HeaderRevision)
	if epoch == "" || rev == "" {
		return flowstate.Version{}, fmt.Errorf("%w: missing %s or %s header", ErrBadReply, protocol.HeaderEpoch, protocol.HeaderRevision)
	}
	if !protocol.ValidEpoch(epoch) {
		return flowstate.Version{}, fmt.Errorf("%w: %s %.80q is not 1 to %d printable ASCII characters", ErrBadReply, protocol.HeaderEpoch, epoch, protocol.MaxEpochLen)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(rev), 10, 64)
	if err != nil || !canonicalUint(strings.TrimSpace(rev)) {
		return flowstate.Version{}, fmt.Errorf("%w: %s %q is not a decimal uint64", ErrBadReply, protocol.HeaderRevision, rev)
	}
	return flowstate.Version{Epoch: epoch, Revision: n}, nil
}
