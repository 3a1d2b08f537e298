package pgjournal

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// commitDropper is a TCP proxy to a PostgreSQL server. Once armed, it drops
// the first server reply that completes a COMMIT (or the command of tag,
// if set before arming) and closes that client connection: the
// transaction committed on the server, and the client never learns it.
type commitDropper struct {
	l      net.Listener
	target string
	tag    []byte // the CommandComplete tag to drop; nil: COMMIT
	// fatal, if set before arming, passes the reply on up to the end of
	// that CommandComplete and then sends, instead of the rest, the
	// ErrorResponse (FATAL 57P01) of a backend terminated right after its
	// COMMIT, and closes the connection.
	fatal bool
	// raw, if set before arming, is the bytes to cut the reply at instead
	// of a CommandComplete (a row's bytes, say): the reply up to them is
	// passed on, the rest dropped.
	raw []byte
	// hold, if set before arming, passes the reply that holds the bytes to
	// match on whole and then passes nothing more to the client, leaving
	// its connection open: a server that stopped answering.
	hold    bool
	armed   atomic.Bool
	dropped chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

func newCommitDropper(t *testing.T, target string) *commitDropper {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &commitDropper{l: l, target: target, dropped: make(chan struct{})}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() { _ = l.Close(); p.wg.Wait() })
	return p
}

func (p *commitDropper) serve() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.wg.Add(2)
		go func() { defer p.wg.Done(); _, _ = io.Copy(s, c); _ = s.Close() }()
		go func() { defer p.wg.Done(); p.pump(c, s) }()
	}
}

// dropTag is the CommandComplete tag (NUL-terminated) of the reply to drop.
func (p *commitDropper) dropTag() []byte {
	if p.raw != nil {
		return p.raw
	}
	if p.tag == nil {
		return []byte("COMMIT\x00")
	}
	return append(bytes.Clone(p.tag), 0)
}

// pump copies server replies to the client until it meets the one to drop.
func (p *commitDropper) pump(c, s net.Conn) {
	defer c.Close()
	defer s.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 {
			if i := bytes.Index(buf[:n], p.dropTag()); p.armed.Load() && i >= 0 {
				if p.hold {
					_, _ = c.Write(buf[:n])
					p.once.Do(func() { p.armed.Store(false); close(p.dropped) })
					_, _ = io.Copy(io.Discard, s)
					return
				}
				if p.raw != nil {
					_, _ = c.Write(buf[:i])
				}
				if p.fatal {
					_, _ = c.Write(buf[:i+len(p.dropTag())])
					_, _ = c.Write(terminatedReply())
				}
				p.once.Do(func() { p.armed.Store(false); close(p.dropped) })
				return
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// terminatedReply is the ErrorResponse a backend sends when
// pg_terminate_backend (or a fast shutdown) ends it.
func terminatedReply() []byte {
	var fields []byte
	for _, f := range []string{"SFATAL", "VFATAL", "C57P01", "Mterminating connection due to administrator command"} {
		fields = append(append(fields, f...), 0)
	}
	fields = append(fields, 0)
	msg := []byte{'E', 0, 0, 0, 0}
	binary.BigEndian.PutUint32(msg[1:], uint32(4+len(fields)))
	return append(msg, fields...)
}

// TestTerminatedAfterCommitIsNotUnavailable: the backend is terminated
// (FATAL 57P01, as from pg_terminate_backend) once it has sent the reply
// of an append's COMMIT, before the end of the batch's replies: the append
// committed and its client read the COMMIT's reply, so it is acknowledged
// with its seq. It was ErrUnavailable, which says nothing was written,
// for an append that is in the log.
func TestTerminatedAfterCommitIsNotUnavailable(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	proxy := newCommitDropper(t, u.Host)
	u.Host = proxy.l.Addr().String()
	s := open(t, u.String(), Options{})
	ctx := t.Context()

	proxy.fatal = true
	proxy.armed.Store(true)
	res, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{userEvent("once")}})
	<-proxy.dropped
	require.NoError(t, err)
	require.EqualValues(t, 1, res.LastSeq)

	evs, err := s.Events(ctx, "c", journal.EventQuery{})
	require.NoError(t, err, "the pool reconnects")
	require.Len(t, evs, 1)
	require.Equal(t, "once", textOf(evs[0]))
}

// TestUnknownOutcome: the connection drops after the server committed an
// append but before the client heard it: the append reports
// ErrUnknownOutcome (not success, not a plain failure); the write is in
// the log, and the retry with the same fence fails with ErrConflict instead
// of writing twice.
func TestUnknownOutcome(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	proxy := newCommitDropper(t, u.Host)
	u.Host = proxy.l.Addr().String()
	s := open(t, u.String(), Options{})
	ctx := t.Context()

	proxy.armed.Store(true)
	req := func() *messages.AppendRequest {
		return &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{userEvent("once")}}
	}
	_, err = s.Append(ctx, req())
	<-proxy.dropped
	require.ErrorIs(t, err, journal.ErrUnknownOutcome)

	last, err := s.LastSeq(ctx, "c")
	require.NoError(t, err, "the pool reconnects")
	require.EqualValues(t, 1, last, "the append committed")
	_, err = s.Append(ctx, req())
	require.ErrorIs(t, err, journal.ErrConflict, "the fence refuses the retry")
	evs, err := s.Events(ctx, "c", journal.EventQuery{})
	require.NoError(t, err)
	require.Len(t, evs, 1)
}

// TestUnknownOutcomeOfOneStatement: the writes made of one statement that
// commits on its own (CancelDeadline, GCModelCalls) report a connection
// lost once the statement was sent as ErrUnknownOutcome, as a lost COMMIT:
// the statement ran on the server, so ErrUnavailable ("nothing was
// written") would be a lie.
func TestUnknownOutcomeOfOneStatement(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	proxy := newCommitDropper(t, u.Host)
	u.Host = proxy.l.Addr().String()
	s := open(t, u.String(), Options{Audit: true})
	ctx := t.Context()
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{userEvent("hello")},
		Schedule: []*messages.Deadline{{ConversationId: "c", ToolCallId: "tc", At: timestamppb.New(time.Unix(100, 0))}}})
	require.NoError(t, err)
	for turn := range uint64(2) {
		require.NoError(t, s.PutModelCall(ctx, &messages.ModelCall{ConversationId: "c", TurnRef: turn + 1, Created: timestamppb.New(time.Unix(10, 0))}))
	}

	proxy.tag = []byte("DELETE 1")
	proxy.armed.Store(true)
	err = s.CancelDeadline(ctx, "c", "tc")
	<-proxy.dropped
	require.ErrorIs(t, err, journal.ErrUnknownOutcome)
	require.NotErrorIs(t, err, journal.ErrUnavailable)
	n := 0
	require.NoError(t, s.Deadlines(ctx, time.Time{}, func(*messages.Deadline) error { n++; return nil }))
	require.Zero(t, n, "the cancel ran")

	proxy = newCommitDropper(t, u.Host)
	u.Host = proxy.l.Addr().String()
	s = open(t, u.String(), Options{Audit: true})
	proxy.tag = []byte("DELETE 2")
	proxy.armed.Store(true)
	_, err = s.GCModelCalls(ctx, "c", time.Unix(20, 0))
	<-proxy.dropped
	require.ErrorIs(t, err, journal.ErrUnknownOutcome)
	require.NotErrorIs(t, err, journal.ErrUnavailable)
	mcs, err := s.ModelCalls(ctx, "c")
	require.NoError(t, err)
	require.Empty(t, mcs, "the GC ran")
}

// TestTerminatedAfterCommitOfAWrite: the writes outside AppendBatch, whose
// client cannot tell the reply of the commit from what follows it: a
// write of its own transaction (PutMetadata) and a write of one statement
// that commits on its own (CancelDeadline), whose backend was terminated
// (FATAL 57P01) once the commit's reply was sent, are ErrUnknownOutcome.
// Both were ErrUnavailable, which says nothing was written, for writes
// that are in the database.
func TestTerminatedAfterCommitOfAWrite(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	proxy := newCommitDropper(t, u.Host)
	u.Host = proxy.l.Addr().String()
	s := open(t, u.String(), Options{})
	ctx := t.Context()
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{userEvent("hello")},
		Schedule: []*messages.Deadline{{ConversationId: "c", ToolCallId: "tc", At: timestamppb.New(time.Unix(100, 0))}}})
	require.NoError(t, err)

	proxy.fatal = true
	proxy.armed.Store(true)
	err = s.PutMetadata(ctx, "c", map[string]string{"k": "v"})
	<-proxy.dropped
	require.ErrorIs(t, err, journal.ErrUnknownOutcome)
	require.NotErrorIs(t, err, journal.ErrUnavailable)
	md, err := s.Metadata(ctx, "c")
	require.NoError(t, err, "the pool reconnects")
	require.Equal(t, map[string]string{"k": "v"}, md)

	proxy = newCommitDropper(t, u.Host)
	u.Host = proxy.l.Addr().String()
	s = open(t, u.String(), Options{})
	proxy.tag, proxy.fatal = []byte("DELETE 1"), true
	proxy.armed.Store(true)
	err = s.CancelDeadline(ctx, "c", "tc")
	<-proxy.dropped
	require.ErrorIs(t, err, journal.ErrUnknownOutcome)
	require.NotErrorIs(t, err, journal.ErrUnavailable)
}
