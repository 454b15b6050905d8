package kv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of JetStreamConfig.
const (
	DefaultEpochKey      = "__flow/epoch"
	DefaultProbeKey      = "__flow/probe"
	DefaultOpTimeout     = 2 * time.Second
	DefaultCheckInterval = time.Second
	DefaultHeartbeat     = time.Second
	DefaultProbeInterval = 250 * time.Millisecond
)

// ErrIncompatibleBucket is wrapped by the error of OpenJetStream when the
// bucket exists with settings other than those asked for.
var ErrIncompatibleBucket = errors.New("kv: the bucket exists with other settings")

// JetStreamConfig configures a JetStream store. Zero values take the
// defaults.
type JetStreamConfig struct {
	Bucket   string // required: the key-value bucket
	Replicas int    // replicas of a bucket created by the store; 0: 1
	Storage  string // "memory" (the default) or "file", for a created bucket
	// EpochKey holds the bucket's epoch; DefaultEpochKey if empty. The store
	// reserves it: Range does not list it and writes to it are refused.
	EpochKey string
	// ProbeKey is where the store writes a deletion to find out whether
	// JetStream takes writes again; DefaultProbeKey if empty. Reserved too.
	ProbeKey string
	// OpTimeout bounds every request to JetStream; DefaultOpTimeout if 0.
	OpTimeout time.Duration
	// CheckInterval is how often a Watch reads the epoch key, to notice a
	// wiped or recreated bucket (a stream purge is silent to watchers);
	// DefaultCheckInterval if 0.
	CheckInterval time.Duration
	// Heartbeat is the idle heartbeat of a Watch's consumer: a watch that
	// hears nothing for two heartbeats recreates its consumer where it left
	// off; DefaultHeartbeat if 0.
	Heartbeat time.Duration
	// ProbeInterval is how often the store checks whether JetStream is back
	// after a write found it unavailable; DefaultProbeInterval if 0.
	ProbeInterval time.Duration
	Logger        *slog.Logger // nil: discard
}

func (c JetStreamConfig) withDefaults() JetStreamConfig {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Storage == "" {
		c.Storage = "memory"
	}
	if c.EpochKey == "" {
		c.EpochKey = DefaultEpochKey
	}
	if c.ProbeKey == "" {
		c.ProbeKey = DefaultProbeKey
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = DefaultOpTimeout
	}
	if c.CheckInterval == 0 {
		c.CheckInterval = DefaultCheckInterval
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = DefaultProbeInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

var validBucket = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// Validate reports the first invalid field of c.
func (c JetStreamConfig) Validate() error {
	switch {
	case !validBucket.MatchString(c.Bucket):
		return fmt.Errorf("bucket %q: want letters, digits, '_' and '-' only", c.Bucket)
	case c.Replicas < 0 || c.Replicas > 5:
		return fmt.Errorf("replicas %d: want 1 to 5", c.Replicas)
	case c.Storage != "" && c.Storage != "memory" && c.Storage != "file":
		return fmt.Errorf("storage %q: want memory or file", c.Storage)
	case c.EpochKey != "" && !validKey(c.EpochKey):
		return fmt.Errorf("epoch key %q is not a valid key", c.EpochKey)
	case c.ProbeKey != "" && !validKey(c.ProbeKey):
		return fmt.Errorf("probe key %q is not a valid key", c.ProbeKey)
	case c.OpTimeout < 0 || c.CheckInterval < 0 || c.Heartbeat < 0 || c.ProbeInterval < 0:
		return errors.New("durations must not be negative")
	}
	return nil
}

func (c JetStreamConfig) storageType() jetstream.StorageType {
	if c.Storage == "file" {
		return jetstream.FileStorage
	}
	return jetstream.MemoryStorage
}

// JetStream is a Store on a NATS JetStream key-value bucket, which several
// processes share. It is also Conditional and a Watcher.
//
// Keys and values are stored as given: key k is the bucket's key k (subject
// $KV.<bucket>.k), so `nats kv get <bucket> <key>` shows what was put. Keys
// are made of letters, digits and - / _ = . (no leading, trailing or double
// dot); '/' is part of a key, not a separator, so Range lists the bucket and
// filters by prefix.
//
// Revisions are the stream's sequence numbers: per key they are the bucket's
// revisions, and across keys they order every write of every process.
//
// Epoch: the bucket holds one reserved key (EpochKey) whose value, 16 random
// hex digits, names the bucket's lineage. The first process to find it
// missing creates it with a create-only write, so that exactly one value
// wins. Clear purges the bucket and creates a new epoch; a bucket wiped or
// recreated by anyone else loses the key, and a Watch notices (from the
// key's deletion, from sequence numbers going back, or from its periodic
// read of the key) and starts over with OpReset at the new epoch; deleting
// the key alone starts a new epoch over the keys that remain. The epoch of a
// write's Revision is the one this store last saw.
//
// Availability: every request is bounded by OpTimeout. A write that finds
// JetStream unavailable (no quorum, no stream, no connection, timeout)
// returns an error wrapping ErrUnavailable, and so does every write after
// it, at once, until a probe (every ProbeInterval) finds the bucket
// taking writes again (it writes a deletion of ProbeKey); the probe also
// recreates a bucket that was deleted.
// So a worker answers quickly while JetStream is down, and recovers by
// itself.
//
// Cost, measured on a 2-core VM that also ran the server and the load
// (README, Backends): a write is one JetStream round trip, about 0.4 ms, so
// a worker that writes one report at a time and waits for its watch acks
// some 2,500 reports a second (memory storage, R1), 2,200 with file
// storage, 730 with three workers on an R3 bucket of three servers on the
// same two cores. Another store's watch delivers a write within 1.2 ms
// (p99) of its acknowledgement.
type JetStream struct {
	cfg    JetStreamConfig
	nc     *nats.Conn
	js     jetstream.JetStream
	legacy nats.JetStreamContext // for the ordered push consumer of Watch
	log    *slog.Logger
	stream string // KV_<bucket>
	prefix string // $KV.<bucket>.

	h     atomic.Pointer[handles]
	epoch atomic.Pointer[string] // the epoch this store last saw

	down    atomic.Bool // a write found JetStream unavailable; no probe has succeeded since
	probeMu sync.Mutex  // guards probing and closed
	probing bool
	closed  bool
	stop    chan struct{} // closed by Close
	wg      sync.WaitGroup
}

// handles are the bucket's handles, replaced when the bucket is recreated.
type handles struct {
	kv     jetstream.KeyValue
	stream jetstream.Stream
}

var _ Shared = (*JetStream)(nil)

// OpenJetStream opens the bucket cfg.Bucket on nc's JetStream, creating it
// if it is missing, and makes sure that it has an epoch. It waits for
// JetStream while it is unavailable, until ctx ends. A bucket with other
// replicas or storage than asked, or with a TTL, is an error wrapping
// ErrIncompatibleBucket. The connection stays the caller's.
func OpenJetStream(ctx context.Context, nc *nats.Conn, cfg JetStreamConfig) (*JetStream, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("kv: %w", err)
	}
	cfg = cfg.withDefaults()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("kv: %w", err)
	}
	legacy, err := nc.JetStream(nats.MaxWait(cfg.OpTimeout))
	if err != nil {
		return nil, fmt.Errorf("kv: %w", err)
	}
	s := &JetStream{
		cfg:    cfg,
		nc:     nc,
		js:     js,
		legacy: legacy,
		log:    cfg.Logger,
		stream: "KV_" + cfg.Bucket,
		prefix: "$KV." + cfg.Bucket + ".",
		stop:   make(chan struct{}),
	}
	for {
		err = s.ensureBucket(ctx, true)
		if err == nil {
			_, err = s.Epoch(ctx)
		}
		if err == nil || !errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
			break
		}
		s.log.Warn("JetStream not available yet, retrying", slog.String("bucket", cfg.Bucket), slog.Any("err", err))
		select {
		case <-ctx.Done():
		case <-time.After(cfg.ProbeInterval * 4):
		}
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Bucket returns the bucket's name.
func (s *JetStream) Bucket() string { return s.cfg.Bucket }

// Close stops the store's background probe. The bucket and the connection
// are left as they are.
func (s *JetStream) Close() {
	s.probeMu.Lock()
	if !s.closed {
		s.closed = true
		close(s.stop)
	}
	s.probeMu.Unlock()
	s.wg.Wait()
}

// ensureBucket opens the bucket, creating it if it is missing, and checks
// its settings: a mismatch is an error if strict, and logged otherwise.
func (s *JetStream) ensureBucket(ctx context.Context, strict bool) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	created := false
	stream, err := s.js.Stream(ctx, s.stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = s.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      s.cfg.Bucket,
			Description: "flow state, shared by flowstate workers",
			History:     1,
			Storage:     s.cfg.storageType(),
			Replicas:    s.cfg.Replicas,
		})
		if err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
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
	kv, err := s.js.KeyValue(ctx, s.cfg.Bucket)
	if err != nil {
		return s.wrap("open bucket "+s.cfg.Bucket, err)
	}
	s.h.Store(&handles{kv: kv, stream: stream})
	if created {
		s.log.Info("bucket created", slog.String("bucket", s.cfg.Bucket), slog.Int("replicas", s.cfg.Replicas),
			slog.String("storage", s.cfg.Storage))
	}
	return nil
}

// compatible checks an existing bucket's settings against the configured
// ones.
func (s *JetStream) compatible(c jetstream.StreamConfig) error {
	storage := "file"
	if c.Storage == jetstream.MemoryStorage {
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

func (s *JetStream) handles() *handles { return s.h.Load() }

func (s *JetStream) subject(key string) string { return s.prefix + key }

// Get implements Store.
func (s *JetStream) Get(ctx context.Context, key string) (Entry, error) {
	if !validKey(key) {
		return Entry{}, fmt.Errorf("kv: get: invalid key %q", key)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	e, err := s.handles().kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return Entry{}, ErrNotFound
	}
	if err != nil {
		return Entry{}, s.wrap("get "+key, err)
	}
	return Entry{Key: key, Value: clone(e.Value()), Revision: e.Revision()}, nil
}

// Put implements Store.
func (s *JetStream) Put(ctx context.Context, key string, value []byte) (Revision, error) {
	return s.write(ctx, "put", key, value, false, nil)
}

// Delete implements Store. Deleting a missing key writes a deletion too.
func (s *JetStream) Delete(ctx context.Context, key string) (Revision, error) {
	return s.write(ctx, "delete", key, nil, true, nil)
}

// PutIf implements Conditional.
func (s *JetStream) PutIf(ctx context.Context, key string, value []byte, cond Condition) (Revision, error) {
	return s.write(ctx, "put", key, value, false, &cond)
}

// DeleteIf implements Conditional.
func (s *JetStream) DeleteIf(ctx context.Context, key string, cond Condition) (Revision, error) {
	return s.write(ctx, "delete", key, nil, true, &cond)
}

// write publishes a put or a deletion of key to the bucket's stream, under
// cond if not nil.
func (s *JetStream) write(ctx context.Context, op, key string, value []byte, del bool, cond *Condition) (Revision, error) {
	what := op + " " + key
	if !validKey(key) {
		return Revision{}, fmt.Errorf("kv: %s: invalid key", what)
	}
	if key == s.cfg.EpochKey || key == s.cfg.ProbeKey {
		return Revision{}, fmt.Errorf("kv: %s: the key is reserved by the store", what)
	}
	if cond != nil && !validKey(cond.Key) {
		return Revision{}, fmt.Errorf("kv: %s: invalid condition key %q", what, cond.Key)
	}
	if err := s.writable(); err != nil {
		return Revision{}, fmt.Errorf("%w: %s: %v", ErrUnavailable, what, err)
	}
	msg := &nats.Msg{Subject: s.subject(key), Data: value, Header: nats.Header{}}
	if del {
		msg.Header.Set("KV-Operation", "DEL")
	}
	var opts []jetstream.PublishOpt
	if cond != nil {
		if cond.Key == key {
			opts = append(opts, jetstream.WithExpectLastSequencePerSubject(cond.Revision))
		} else {
			opts = append(opts, jetstream.WithExpectLastSequenceForSubject(cond.Revision, s.subject(cond.Key)))
		}
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	ack, err := s.js.PublishMsg(ctx, msg, opts...)
	if err != nil {
		if isWrongLastSequence(err) {
			return Revision{}, fmt.Errorf("%w: %s: %v", ErrRevisionMismatch, what, err)
		}
		err = s.wrap(what, err)
		if errors.Is(err, ErrUnavailable) {
			s.markDown(err)
		}
		return Revision{}, err
	}
	return Revision{Epoch: s.lastEpoch(), Seq: ack.Sequence}, nil
}

// Range implements Store. It reads every key's last value with an ordered
// consumer, so its cost grows with the bucket, not with the prefix.
func (s *JetStream) Range(ctx context.Context, prefix string) ([]Entry, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	w, err := s.handles().kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, s.wrap("range "+prefix, err)
	}
	defer func() { _ = w.Stop() }()
	var out []Entry
	for {
		select {
		case <-ctx.Done():
			return nil, s.wrap("range "+prefix, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("%w: range %s: the watch closed", ErrUnavailable, prefix)
			}
			if e == nil { // every current value has been delivered
				slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Key, b.Key) })
				return out, nil
			}
			if strings.HasPrefix(e.Key(), prefix) && e.Key() != s.cfg.EpochKey {
				out = append(out, Entry{Key: e.Key(), Value: clone(e.Value()), Revision: e.Revision()})
			}
		}
	}
}

// Clear implements Store: it purges the bucket's stream, which removes
// every key, the epoch key included, and creates a new epoch. Sequence
// numbers keep growing.
func (s *JetStream) Clear(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	if err := s.handles().stream.Purge(pctx); err != nil {
		return s.wrap("clear", err)
	}
	_, err := s.Epoch(ctx)
	return err
}

// Epoch implements Store: it reads the epoch key, and creates it with a new
// epoch if it is missing.
func (s *JetStream) Epoch(ctx context.Context) (string, error) {
	for range 5 {
		e, err := s.Get(ctx, s.cfg.EpochKey)
		if err == nil && len(e.Value) > 0 {
			s.setEpoch(string(e.Value))
			return string(e.Value), nil
		}
		if err != nil && !errors.Is(err, ErrNotFound) {
			return "", err
		}
		epoch := newEpoch()
		cctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
		_, err = s.handles().kv.Create(cctx, s.cfg.EpochKey, []byte(epoch))
		cancel()
		if err == nil {
			s.setEpoch(epoch)
			s.log.Info("new epoch", slog.String("bucket", s.cfg.Bucket), slog.String("epoch", epoch))
			return epoch, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return "", s.wrap("create epoch", err)
		}
		// Another process created it first: read theirs.
	}
	return "", fmt.Errorf("%w: the epoch key keeps changing", ErrUnavailable)
}

// LastRevision implements Watcher: the stream's last sequence number, as its
// leader knows it (0 if the bucket is empty).
func (s *JetStream) LastRevision(ctx context.Context) (Revision, error) {
	if err := s.writable(); err != nil {
		return Revision{}, fmt.Errorf("%w: last revision: %v", ErrUnavailable, err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	info, err := s.handles().stream.Info(ctx)
	if err != nil {
		return Revision{}, s.wrap("last revision", err)
	}
	rev := Revision{Epoch: s.lastEpoch()}
	if info.State.Msgs > 0 {
		rev.Seq = info.State.LastSeq
	}
	return rev, nil
}

func (s *JetStream) setEpoch(e string) {
	if old := s.epoch.Load(); old == nil || *old != e {
		s.epoch.Store(&e)
	}
}

func (s *JetStream) lastEpoch() string {
	if e := s.epoch.Load(); e != nil {
		return *e
	}
	return ""
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
