package jetstream

import (
	"bytes"
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
	natsjs "github.com/nats-io/nats.go/jetstream"

	"flowstate/kv"
)

// Defaults of Config.
const (
	DefaultEpochKey      = "__flow/epoch"
	DefaultProbeKey      = "__flow/probe"
	DefaultOpTimeout     = 2 * time.Second
	DefaultCheckInterval = time.Second
	DefaultHeartbeat     = time.Second
	DefaultProbeInterval = 250 * time.Millisecond
)

// ErrIncompatibleBucket is wrapped by the error of Open when the
// bucket exists with settings other than those asked for.
var ErrIncompatibleBucket = errors.New("jetstream: the bucket exists with other settings")

// Config configures a JetStream store. Zero values take the
// defaults.
type Config struct {
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
	// Window is how many puts PutAsync keeps in flight; DefaultWindow if 0.
	Window int
	Logger *slog.Logger // nil: discard
}

func (c Config) withDefaults() Config {
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
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

var validBucket = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// Validate reports the first invalid field of c.
func (c Config) Validate() error {
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
	case c.Window < 0:
		return fmt.Errorf("window %d: want a positive number of puts in flight", c.Window)
	case c.OpTimeout < 0 || c.CheckInterval < 0 || c.Heartbeat < 0 || c.ProbeInterval < 0:
		return errors.New("durations must not be negative")
	}
	return nil
}

func (c Config) storageType() natsjs.StorageType {
	if c.Storage == "file" {
		return natsjs.FileStorage
	}
	return natsjs.MemoryStorage
}

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

	h     atomic.Pointer[handles]
	epoch atomic.Pointer[epochAt] // the epoch this store last saw

	down    atomic.Bool // a write found JetStream unavailable; no probe has succeeded since
	probeMu sync.Mutex  // guards probing and closed
	probing bool
	closed  bool
	stop    chan struct{} // closed by Close
	wg      sync.WaitGroup
}

// handles are the bucket's handles, replaced when the bucket is recreated.
type handles struct {
	bucket natsjs.KeyValue
	stream natsjs.Stream
}

var _ kv.Shared = (*Store)(nil)

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
	}
	if s.async, err = newAsyncPuts(s); err != nil {
		return nil, err
	}
	for {
		err = s.ensureBucket(ctx, true)
		if err == nil {
			err = s.checkFencing(ctx)
		}
		if err == nil || !errors.Is(err, kv.ErrUnavailable) || ctx.Err() != nil {
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
func (s *Store) Bucket() string { return s.cfg.Bucket }

// Close stops the store's background probe. The bucket and the connection
// are left as they are.
func (s *Store) Close() {
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
func (s *Store) ensureBucket(ctx context.Context, strict bool) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
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

func (s *Store) subject(key string) string { return s.prefix + key }

// Get implements Store.
func (s *Store) Get(ctx context.Context, key string) (kv.Entry, error) {
	if !validKey(key) {
		return kv.Entry{}, fmt.Errorf("jetstream: get: invalid key %q", key)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
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
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	ack, err := s.js.PublishMsg(ctx, msg, opts...)
	if err != nil {
		if isWrongLastSequence(err) {
			return kv.Revision{}, fmt.Errorf("%w: %s: %v", kv.ErrRevisionMismatch, what, err)
		}
		err = s.wrap(what, err)
		if errors.Is(err, kv.ErrUnavailable) {
			s.markDown(err)
		}
		return kv.Revision{}, err
	}
	return kv.Revision{Epoch: s.lastEpoch(), Seq: ack.Sequence}, nil
}

// Range implements Store. It reads every key's last value with an ordered
// consumer, so its cost grows with the bucket, not with the prefix.
func (s *Store) Range(ctx context.Context, prefix string) ([]kv.Entry, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	w, err := s.handles().bucket.WatchAll(ctx, natsjs.IgnoreDeletes())
	if err != nil {
		return nil, s.wrap("range "+prefix, err)
	}
	defer func() { _ = w.Stop() }()
	var out []kv.Entry
	for {
		select {
		case <-ctx.Done():
			return nil, s.wrap("range "+prefix, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("%w: range %s: the watch closed", kv.ErrUnavailable, prefix)
			}
			if e == nil { // every current value has been delivered
				slices.SortFunc(out, func(a, b kv.Entry) int { return strings.Compare(a.Key, b.Key) })
				return out, nil
			}
			if strings.HasPrefix(e.Key(), prefix) && e.Key() != s.cfg.EpochKey {
				out = append(out, kv.Entry{Key: e.Key(), Value: bytes.Clone(e.Value()), Revision: e.Revision()})
			}
		}
	}
}

// Clear implements Store: it purges the bucket's stream, which removes
// every key, the epoch key included, and creates a new epoch. Sequence
// numbers keep growing.
func (s *Store) Clear(ctx context.Context) error {
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
func (s *Store) Epoch(ctx context.Context) (string, error) {
	for range 5 {
		e, err := s.Get(ctx, s.cfg.EpochKey)
		if err == nil && len(e.Value) > 0 {
			s.setEpoch(string(e.Value), e.Revision)
			return string(e.Value), nil
		}
		if err != nil && !errors.Is(err, kv.ErrNotFound) {
			return "", err
		}
		epoch := kv.NewEpoch()
		cctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
		seq, err := s.handles().bucket.Create(cctx, s.cfg.EpochKey, []byte(epoch))
		cancel()
		if err == nil {
			s.setEpoch(epoch, seq)
			s.log.Info("new epoch", slog.String("bucket", s.cfg.Bucket), slog.String("epoch", epoch))
			return epoch, nil
		}
		if !errors.Is(err, natsjs.ErrKeyExists) {
			return "", s.wrap("create epoch", err)
		}
		// Another process created it first: read theirs.
	}
	return "", fmt.Errorf("%w: the epoch key keeps changing", kv.ErrUnavailable)
}

// LastRevision implements Watcher: the stream's last sequence number, as its
// leader knows it (0 if the bucket is empty).
func (s *Store) LastRevision(ctx context.Context) (kv.Revision, error) {
	if err := s.writable(); err != nil {
		return kv.Revision{}, fmt.Errorf("%w: last revision: %v", kv.ErrUnavailable, err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	info, err := s.handles().stream.Info(ctx)
	if err != nil {
		return kv.Revision{}, s.wrap("last revision", err)
	}
	rev := kv.Revision{Epoch: s.lastEpoch()}
	if info.State.Msgs > 0 {
		rev.Seq = info.State.LastSeq
	}
	return rev, nil
}

// epochAt is an epoch and the sequence number of the epoch key's write
// that started it.
type epochAt struct {
	name string
	seq  uint64
}

func (s *Store) setEpoch(e string, seq uint64) {
	if old := s.epoch.Load(); old == nil || old.name != e || old.seq != seq {
		s.epoch.Store(&epochAt{name: e, seq: seq})
	}
}

func (s *Store) lastEpoch() string {
	if e := s.epoch.Load(); e != nil {
		return e.name
	}
	return ""
}

// epochSeq is the sequence number of the epoch key's write that started the
// epoch this store last saw (0 if none yet).
func (s *Store) epochSeq() uint64 {
	if e := s.epoch.Load(); e != nil {
		return e.seq
	}
	return 0
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
