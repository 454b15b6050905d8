package jetstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/flowstate-io/flowstate/internal/clock"
	"github.com/flowstate-io/flowstate/kv"
)

// Store is a kv.Shared on a NATS JetStream key-value bucket, which several
// processes share: a kv.Store that is also kv.Conditional and a kv.Watcher.
// The package documentation describes its keys, revisions, epoch and
// availability.
type Store struct {
	cfg    Config
	nc     *nats.Conn
	js     natsjs.JetStream
	legacy nats.JetStreamContext // for the ordered push consumer of Watch
	async  *asyncPuts            // PutAsync's
	log    *slog.Logger
	stream string // KV_<bucket>
	prefix string // $KV.<bucket>.

	h         atomic.Pointer[handles]
	epoch     atomic.Pointer[epochAt] // the epoch this store last saw
	replicas  replicaWatch            // WatchReplicas's last look
	barrier   rounds                  // LastRevision's shared writes
	storedSeq atomic.Uint64           // the highest sequence number of a write seen stored (failover.go)
	forgets   atomic.Uint64           // times the stream no longer held mark
	known     *knownWrites            // the writes the stream acknowledged or delivered (known.go)

	down    atomic.Bool // a write found JetStream unavailable; no probe has succeeded since
	probeMu sync.Mutex  // guards probing and closed
	probing bool
	closed  bool
	stop    chan struct{} // closed by Close
	wg      sync.WaitGroup

	// afterFenceRead, if set by a test, runs between checkFencing's read
	// of the epoch key's sequence number and its first probe.
	afterFenceRead func()
}

// handles are the bucket's handles, replaced when the bucket is recreated.
type handles struct {
	bucket natsjs.KeyValue
	stream natsjs.Stream
}

var (
	_ kv.Shared      = (*Store)(nil)
	_ kv.AsyncPutter = (*Store)(nil)
)

// Open opens the bucket cfg.Bucket on nc's JetStream, creating it
// if it is missing, and makes sure that it has an epoch. It waits for
// JetStream while it is unavailable, until ctx ends. A bucket with other
// replicas or storage than asked, or with a TTL, is an error wrapping
// ErrIncompatibleBucket. A server that does not enforce subject-fenced
// writes (older than RequiredServerVersion, by its INFO or by a probe write
// on the bucket's stream leader) is a *ServerTooOldError, which wraps
// ErrServerTooOld. The connection stays the caller's.
func Open(ctx context.Context, nc *nats.Conn, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	cfg = cfg.withDefaults()
	if err := checkServerVersion(nc); err != nil {
		return nil, err
	}
	js, err := natsjs.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	legacy, err := nc.JetStream(nats.MaxWait(cfg.OpTimeout))
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	s := &Store{
		cfg:    cfg,
		nc:     nc,
		js:     js,
		legacy: legacy,
		log:    cfg.Logger,
		stream: "KV_" + cfg.Bucket,
		prefix: "$KV." + cfg.Bucket + ".",
		stop:   make(chan struct{}),
		known:  newKnownWrites(),
	}
	if s.async, err = newAsyncPuts(nc, cfg.Window, cfg.OpTimeout, cfg.Clock, s.markDown, s.lastEpoch, s.stored, s.known); err != nil {
		return nil, err
	}
	if err := s.checkEnabled(ctx); err != nil {
		s.Close()
		return nil, err
	}
	var last error // the last failure that was not ctx's end
	for failed := 1; ; failed++ {
		err = s.ensureBucket(ctx, true)
		if err == nil {
			err = s.checkFencing(ctx)
		}
		if err == nil || !errors.Is(err, kv.ErrUnavailable) {
			break
		}
		if ctx.Err() != nil {
			err = waitedFor(ctx, err, last, s.nc.IsConnected())
			break
		}
		last = err
		s.log.Warn("JetStream not available yet, retrying", slog.String("bucket", cfg.Bucket), slog.Any("err", err))
		if failed%switchAfter == 0 {
			s.tryAnotherServer(ctx, err)
		}
		_ = clock.Sleep(ctx, cfg.Clock, cfg.ProbeInterval*4)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// waitedFor is the error of an Open whose ctx ended while JetStream was
// unavailable: it names the last real reason, not only ctx's end, and
// whether the connection was up at all.
func waitedFor(ctx context.Context, err, last error, connected bool) error {
	if last == nil || !errors.Is(err, ctx.Err()) {
		return err
	}
	if !connected {
		return fmt.Errorf("JetStream not available in time (%w): not connected to NATS; the last reason: %w", ctx.Err(), last)
	}
	return fmt.Errorf("JetStream not available in time (%w); the last reason: %w", ctx.Err(), last)
}

// Bucket returns the bucket's name.
func (s *Store) Bucket() string { return s.cfg.Bucket }

// Close stops the store's background probe and answers the puts still in
// flight as unavailable. The bucket and the connection are left as they
// are.
func (s *Store) Close() {
	s.probeMu.Lock()
	if !s.closed {
		s.closed = true
		close(s.stop)
	}
	s.probeMu.Unlock()
	s.wg.Wait()
	s.async.close()
}

// ensureBucket opens the bucket, creating it if it is missing, and checks
// its settings: a mismatch is an error if strict, and logged otherwise.
func (s *Store) ensureBucket(ctx context.Context, strict bool) error {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	created := false
	stream, err := s.js.Stream(ctx, s.stream)
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		_, err = s.js.CreateKeyValue(ctx, natsjs.KeyValueConfig{
			Bucket:      s.cfg.Bucket,
			Description: "flow state, shared by flowstate workers",
			History:     1,
			Storage:     s.cfg.storageType(),
			Replicas:    s.cfg.Replicas,
		})
		if err != nil && !errors.Is(err, natsjs.ErrBucketExists) {
			return s.wrap("create bucket "+s.cfg.Bucket, err)
		}
		created = err == nil
		stream, err = s.js.Stream(ctx, s.stream)
	}
	if err != nil {
		return s.wrap("open bucket "+s.cfg.Bucket, err)
	}
	if err := s.compatible(stream.CachedInfo().Config); err != nil {
		if strict {
			return err
		}
		s.log.Error("bucket settings differ from the configured ones", slog.Any("err", err))
	}
	bucket, err := s.js.KeyValue(ctx, s.cfg.Bucket)
	if err != nil {
		return s.wrap("open bucket "+s.cfg.Bucket, err)
	}
	s.h.Store(&handles{bucket: bucket, stream: stream})
	if created {
		s.log.Info("bucket created", slog.String("bucket", s.cfg.Bucket), slog.Int("replicas", s.cfg.Replicas),
			slog.String("storage", s.cfg.Storage))
	}
	return nil
}

// compatible checks an existing bucket's settings against the configured
// ones.
func (s *Store) compatible(c natsjs.StreamConfig) error {
	storage := "file"
	if c.Storage == natsjs.MemoryStorage {
		storage = "memory"
	}
	replicas := max(c.Replicas, 1)
	switch {
	case replicas != s.cfg.Replicas || storage != s.cfg.Storage:
		return fmt.Errorf("%w: bucket %q has %d replicas and %s storage, not %d replicas and %s storage",
			ErrIncompatibleBucket, s.cfg.Bucket, replicas, storage, s.cfg.Replicas, s.cfg.Storage)
	case c.MaxAge != 0:
		return fmt.Errorf("%w: bucket %q expires keys after %v, and the state must not expire",
			ErrIncompatibleBucket, s.cfg.Bucket, c.MaxAge)
	case c.MaxMsgsPerSubject == 0 || len(c.Subjects) != 1 || c.Subjects[0] != s.prefix+">":
		return fmt.Errorf("%w: stream %q is not a key-value bucket", ErrIncompatibleBucket, s.stream)
	}
	return nil
}

func (s *Store) handles() *handles { return s.h.Load() }

// opContext bounds one request to JetStream: OpTimeout of the store's
// clock (and the client library's own bound, of real time).
func (s *Store) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return clock.WithTimeout(ctx, s.cfg.Clock, s.cfg.OpTimeout)
}

func (s *Store) subject(key string) string { return s.prefix + key }

// Get implements Store.
func (s *Store) Get(ctx context.Context, key string) (kv.Entry, error) {
	if !validKey(key) {
		return kv.Entry{}, fmt.Errorf("jetstream: get: invalid key %q", key)
	}
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	e, err := s.handles().bucket.Get(ctx, key)
	if errors.Is(err, natsjs.ErrKeyNotFound) || errors.Is(err, natsjs.ErrKeyDeleted) {
		return kv.Entry{}, kv.ErrNotFound
	}
	if err != nil {
		return kv.Entry{}, s.wrap("get "+key, err)
	}
	return kv.Entry{Key: key, Value: bytes.Clone(e.Value()), Revision: e.Revision()}, nil
}

// Put implements Store.
func (s *Store) Put(ctx context.Context, key string, value []byte) (kv.Revision, error) {
	return s.write(ctx, "put", key, value, false, nil)
}

// Delete implements Store. Deleting a missing key writes a deletion too.
func (s *Store) Delete(ctx context.Context, key string) (kv.Revision, error) {
	return s.write(ctx, "delete", key, nil, true, nil)
}

// PutIf implements Conditional.
func (s *Store) PutIf(ctx context.Context, key string, value []byte, cond kv.Condition) (kv.Revision, error) {
	return s.write(ctx, "put", key, value, false, &cond)
}

// DeleteIf implements Conditional.
func (s *Store) DeleteIf(ctx context.Context, key string, cond kv.Condition) (kv.Revision, error) {
	return s.write(ctx, "delete", key, nil, true, &cond)
}

// write publishes a put or a deletion of key to the bucket's stream, under
// cond if not nil.
func (s *Store) write(ctx context.Context, op, key string, value []byte, del bool, cond *kv.Condition) (kv.Revision, error) {
	what := op + " " + key
	if !validKey(key) {
		return kv.Revision{}, fmt.Errorf("jetstream: %s: invalid key", what)
	}
	if key == s.cfg.EpochKey || key == s.cfg.ProbeKey {
		return kv.Revision{}, fmt.Errorf("jetstream: %s: the key is reserved by the store", what)
	}
	if cond != nil && !validKey(cond.Key) {
		return kv.Revision{}, fmt.Errorf("jetstream: %s: invalid condition key %q", what, cond.Key)
	}
	if err := s.writable(); err != nil {
		return kv.Revision{}, fmt.Errorf("%w: %s: %v", kv.ErrUnavailable, what, err)
	}
	msg := &nats.Msg{Subject: s.subject(key), Data: value, Header: nats.Header{}}
	if del {
		msg.Header.Set("KV-Operation", "DEL")
	}
	var opts []natsjs.PublishOpt
	if cond != nil {
		if cond.Key == key {
			opts = append(opts, natsjs.WithExpectLastSequencePerSubject(cond.Revision))
		} else {
			opts = append(opts, natsjs.WithExpectLastSequenceForSubject(cond.Revision, s.subject(cond.Key)))
		}
	}
	epoch := s.lastEpoch()
	top := s.known.topOf(epoch)
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	ack, err := s.js.PublishMsg(ctx, msg, opts...)
	if err != nil {
		if isWrongLastSequence(err) {
			refused := mismatch(fmt.Errorf("%w: %s: %v", kv.ErrRevisionMismatch, what, err), err)
			if last, ok := kv.LastWriteOf(refused); ok {
				s.stored(last)
			}
			return kv.Revision{}, refused
		}
		if errors.Is(err, nats.ErrMaxPayload) {
			return kv.Revision{}, fmt.Errorf("%w: %s: %d bytes, past the connection's max payload of %d: %v",
				kv.ErrTooLarge, what, len(value), s.nc.MaxPayload(), err)
		}
		err = s.wrap(what, err)
		if errors.Is(err, kv.ErrUnavailable) {
			s.markDown(err)
		}
		return kv.Revision{}, err
	}
	if err := s.known.numbered(epoch, top, ack.Sequence, "the ", what); err != nil {
		return kv.Revision{}, err
	}
	s.stored(ack.Sequence)
	return kv.Revision{Epoch: s.lastEpoch(), Seq: ack.Sequence}, nil
}

// Clear wipes the bucket, as an operator who purges it does: it purges the
// bucket's stream, which removes every key, the epoch key included, then
// creates a new epoch. Sequence numbers keep growing. Workers never call it;
// tests and tools do.
func (s *Store) Clear(ctx context.Context) error {
	pctx, cancel := s.opContext(ctx)
	defer cancel()
	if err := s.handles().stream.Purge(pctx); err != nil {
		return s.wrap("clear", err)
	}
	_, err := s.Epoch(ctx)
	return err
}

// validKey is the key syntax of NATS key-value buckets.
func validKey(key string) bool {
	if key == "" || key[0] == '.' || key[len(key)-1] == '.' || strings.Contains(key, "..") {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-/_=.", c) >= 0) {
			return false
		}
	}
	return true
}
