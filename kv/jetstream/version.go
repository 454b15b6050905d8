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
// writes, and how that was seen. Its message is one line that names the
// version or the write found and the version required.
type ServerTooOldError struct {
	// Version is the connected server's, as its INFO gives it.
	Version string
	// Bucket is set when the connected server is recent enough but a probe
	// write found that the bucket's stream leader, another server, stored
	// a write whose fence did not hold (a cluster in the middle of an
	// upgrade).
	Bucket string
	// Leader names the stream leader that stored the probe, when the
	// stream's information named one.
	Leader string
}

func (e *ServerTooOldError) Error() string {
	if e.Bucket != "" {
		leader := ""
		if e.Leader != "" {
			leader = " (server " + e.Leader + ")"
		}
		return fmt.Sprintf("the stream leader of bucket %s%s stored a write fenced on a sequence number that its epoch key does not have: "+
			"it does not enforce subject-fenced writes (Nats-Expected-Last-Subject-Sequence-Subject; connected to nats-server %s); "+
			"a shared state needs nats-server %s or newer on every server", e.Bucket, leader, e.Version, RequiredServerVersion)
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
// leader, which is the server that enforces the header. It writes
// deletions of ProbeKey fenced on the epoch key, and calls the leader old
// only on a write that a leader enforcing the fence cannot have stored:
//
//   - The first is fenced on the epoch key's sequence number. A leader that
//     enforces the fence stores it; an older one compares the number with
//     ProbeKey's own last sequence (another message, so another number)
//     and refuses it.
//   - Stored, the second is fenced on the sequence number the first got,
//     which is ProbeKey's: a leader that enforces the fence refuses it, an
//     older one stores it.
//   - Refused, the first says nothing for sure: the epoch key may have
//     moved since it was read, or a leader just elected may not have
//     applied every write yet (seen with the stream leader cut off from
//     the other servers). So the second is fenced on ProbeKey's own last
//     sequence: again a leader that enforces the fence refuses it, and an
//     older one stores it. Refused too, the answer is not known yet: an
//     error wrapping kv.ErrUnavailable that names what the leader
//     answered, which Open retries like any unavailability.
//
// The epoch key's sequence number is read from the leader: a get may be
// answered by a follower that has not applied the epoch key's last write
// yet (seen right after a purge, on an R3 bucket: the worker had just
// created the key and was told it was not there).
func (s *Store) checkFencing(ctx context.Context) error {
	if _, err := s.Epoch(ctx); err != nil {
		return err
	}
	epochSeq, err := s.leaderSeqOf(ctx, s.cfg.EpochKey)
	if err != nil {
		return err
	}
	if s.afterFenceRead != nil {
		s.afterFenceRead()
	}
	ack, first := s.fencedProbe(ctx, epochSeq)
	if first != nil && !isWrongLastSequence(first) {
		return first
	}
	var probeSeq uint64
	if first == nil {
		probeSeq = ack.Sequence
	} else if probeSeq, err = s.probeKeySeq(ctx); err != nil {
		return err
	}
	_, second := s.fencedProbe(ctx, probeSeq)
	switch {
	case second == nil:
		return &ServerTooOldError{Version: s.nc.ConnectedServerVersion(), Bucket: s.cfg.Bucket, Leader: s.streamLeader(ctx)}
	case !isWrongLastSequence(second):
		return second
	case first == nil:
		return nil
	}
	return fmt.Errorf("%w: subject-fenced writes not confirmed yet: the stream leader%s refused a probe fenced on the epoch key's sequence %d (%v) "+
		"and one fenced on the probe key's %d (%v)", kv.ErrUnavailable, s.leaderSuffix(ctx), epochSeq, first, probeSeq, second)
}

// probeKeySeq returns the sequence number of ProbeKey's last write as the
// stream's leader has it, writing a deletion of the key first if it has
// none.
func (s *Store) probeKeySeq(ctx context.Context) (uint64, error) {
	if seq, err := s.leaderSeqOf(ctx, s.cfg.ProbeKey); err == nil || !errors.Is(err, errKeyGone) {
		return seq, err
	}
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	ack, err := s.deleteProbeKey(ctx)
	if err != nil {
		return 0, s.wrap("write the probe key", err)
	}
	return ack.Sequence, nil
}

// streamLeader names the bucket's stream leader as the stream's
// information gives it now, or "" if it names none.
func (s *Store) streamLeader(ctx context.Context) string {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	info, err := s.handles().stream.Info(ctx)
	if err != nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Leader
}

// leaderSuffix is " (server NAME)" for the stream's leader, or "".
func (s *Store) leaderSuffix(ctx context.Context) string {
	if l := s.streamLeader(ctx); l != "" {
		return " (server " + l + ")"
	}
	return ""
}

// fencedProbe writes a deletion of ProbeKey if the last write of the epoch
// key has sequence number seq.
func (s *Store) fencedProbe(ctx context.Context, seq uint64) (*natsjs.PubAck, error) {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	ack, err := s.deleteProbeKey(ctx, natsjs.WithExpectLastSequenceForSubject(seq, s.subject(s.cfg.EpochKey)))
	if err != nil && !isWrongLastSequence(err) {
		return nil, s.wrap("probe fenced writes", err)
	}
	return ack, err
}

// errKeyGone is wrapped by leaderSeqOf's error for a key with no write.
var errKeyGone = errors.New("the bucket was wiped")

// leaderSeqOf returns the sequence number of key's last write as the
// stream's leader has it (Get may be answered by a follower). A key that is
// not there (the bucket was wiped meanwhile) is an error wrapping
// kv.ErrUnavailable, so that Open tries again.
func (s *Store) leaderSeqOf(ctx context.Context, key string) (uint64, error) {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	m, err := s.legacy.GetLastMsg(s.stream, s.subject(key), nats.Context(ctx))
	if errors.Is(err, nats.ErrMsgNotFound) {
		return 0, fmt.Errorf("%w: %s is gone: %w", kv.ErrUnavailable, key, errKeyGone)
	}
	if err != nil {
		return 0, s.wrap("read "+key, err)
	}
	return m.Sequence, nil
}
