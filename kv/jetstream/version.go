package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/flowstate-io/flowstate/kv"
)

// RequiredServerVersion is the oldest nats-server whose stream leaders
// enforce subject-fenced writes (the header
// Nats-Expected-Last-Subject-Sequence-Subject), on which the publisher's
// aggregate write relies: an older leader ignores the header and stores the
// write whatever the fence says.
const RequiredServerVersion = "2.11"

// ErrServerTooOld is wrapped by the error of Open (a *ServerTooOldError)
// when the server does not enforce subject-fenced writes.
var ErrServerTooOld = errors.New("jetstream: nats-server too old")

// ServerTooOldError says which server does not enforce subject-fenced
// writes. Its message is one line that names the version found and the one
// required.
type ServerTooOldError struct {
	// Version is the connected server's, as its INFO gives it.
	Version string
	// Bucket is set when the connected server is recent enough but the
	// probe write found that the bucket's stream leader, another server,
	// does not enforce the fence (a cluster in the middle of an upgrade).
	Bucket string
}

func (e *ServerTooOldError) Error() string {
	if e.Bucket != "" {
		return fmt.Sprintf("the stream leader of bucket %s does not enforce subject-fenced writes "+
			"(Nats-Expected-Last-Subject-Sequence-Subject; connected to nats-server %s); "+
			"a shared state needs nats-server %s or newer on every server", e.Bucket, e.Version, RequiredServerVersion)
	}
	return fmt.Sprintf("nats-server %s does not enforce subject-fenced writes (Nats-Expected-Last-Subject-Sequence-Subject); "+
		"a shared state needs nats-server %s or newer", e.Version, RequiredServerVersion)
}

// Unwrap returns ErrServerTooOld.
func (e *ServerTooOldError) Unwrap() error { return ErrServerTooOld }

// checkServerVersion is the quick pre-check: the connected server's
// version from its INFO. An unknown version passes; the probe decides.
func checkServerVersion(nc *nats.Conn) error {
	v := nc.ConnectedServerVersion()
	if major, minor, ok := majorMinor(v); !ok || major > 2 || major == 2 && minor >= 11 {
		return nil
	}
	return &ServerTooOldError{Version: v}
}

// majorMinor parses the major and minor numbers of a server version such
// as "2.10.27" or "v2.11.0-RC.1".
func majorMinor(v string) (major, minor int, ok bool) {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}

// checkFencing is the authoritative check, made on the bucket's stream
// leader, which is the server that enforces the header: two deletions of
// ProbeKey fenced on the epoch key.
//
//   - The first is fenced on the epoch key's sequence number, which holds:
//     a leader that enforces the fence stores it; an older leader compares
//     the number with ProbeKey's own last sequence (another message, so
//     another number) and refuses it.
//   - The second is fenced on the sequence number the first write got,
//     which is ProbeKey's, not the epoch key's: a leader that enforces the
//     fence refuses it; one that ignores it stores it.
//
// The epoch key may change between the read and the write (another worker
// clears the bucket), so a refused first write is tried again. Its sequence
// number is read from the leader: a get may be answered by a follower that
// has not applied the epoch key's last write yet (seen right after a purge,
// on an R3 bucket: the worker had just created the key and was told it was
// not there).
func (s *Store) checkFencing(ctx context.Context) error {
	for range 3 {
		if _, err := s.Epoch(ctx); err != nil {
			return err
		}
		seq, err := s.leaderSeqOf(ctx, s.cfg.EpochKey)
		if err != nil {
			return err
		}
		ack, err := s.fencedProbe(ctx, seq)
		if isWrongLastSequence(err) {
			continue
		}
		if err != nil {
			return err
		}
		_, err = s.fencedProbe(ctx, ack.Sequence)
		switch {
		case isWrongLastSequence(err):
			return nil
		case err == nil:
			return &ServerTooOldError{Version: s.nc.ConnectedServerVersion(), Bucket: s.cfg.Bucket}
		default:
			return err
		}
	}
	return &ServerTooOldError{Version: s.nc.ConnectedServerVersion(), Bucket: s.cfg.Bucket}
}

// fencedProbe writes a deletion of ProbeKey if the last write of the epoch
// key has sequence number seq.
func (s *Store) fencedProbe(ctx context.Context, seq uint64) (*natsjs.PubAck, error) {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	msg := &nats.Msg{Subject: s.subject(s.cfg.ProbeKey), Header: nats.Header{}}
	msg.Header.Set("KV-Operation", "DEL")
	ack, err := s.js.PublishMsg(ctx, msg, natsjs.WithExpectLastSequenceForSubject(seq, s.subject(s.cfg.EpochKey)))
	if err != nil && !isWrongLastSequence(err) {
		return nil, s.wrap("probe fenced writes", err)
	}
	return ack, err
}

// leaderSeqOf returns the sequence number of key's last write as the
// stream's leader has it (Get may be answered by a follower). A key that is
// not there (the bucket was wiped meanwhile) is an error wrapping
// kv.ErrUnavailable, so that Open tries again.
func (s *Store) leaderSeqOf(ctx context.Context, key string) (uint64, error) {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	m, err := s.legacy.GetLastMsg(s.stream, s.subject(key), nats.Context(ctx))
	if errors.Is(err, nats.ErrMsgNotFound) {
		return 0, fmt.Errorf("%w: %s is gone: the bucket was wiped", kv.ErrUnavailable, key)
	}
	if err != nil {
		return 0, s.wrap("read "+key, err)
	}
	return m.Sequence, nil
}
