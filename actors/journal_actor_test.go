package actors_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// replyWait bounds every wait for a reply. Tests never sleep; they wait on
// channels, and this only keeps a broken test from hanging.
const replyWait = 10 * time.Second

// newTestSystem returns an actor system with protoactor's logging silenced,
// shut down when the test ends.
func newTestSystem(t *testing.T) *actor.ActorSystem {
	t.Helper()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	t.Cleanup(sys.Shutdown)
	return sys
}

// gateStore wraps a Store. It records every AppendBatch, can hold AppendBatch
// until the test releases it, and can make it panic.
type gateStore struct {
	journal.Store
	entered chan int // receives the batch size each time AppendBatch starts

	mu      sync.Mutex
	sizes   []int
	gate    chan struct{} // when set, AppendBatch waits for it to close
	panicky bool
}

func newGateStore() *gateStore {
	return &gateStore{Store: memjournal.New(memjournal.Options{}), entered: make(chan int, 1024)}
}

// hold makes later AppendBatch calls wait until release is called.
func (s *gateStore) hold() (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := make(chan struct{})
	s.gate = g
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.gate == g {
			s.gate = nil
		}
		close(g)
	}
}

func (s *gateStore) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	s.mu.Lock()
	s.sizes = append(s.sizes, len(reqs))
	gate, panicky := s.gate, s.panicky
	s.mu.Unlock()
	s.entered <- len(reqs)
	if gate != nil {
		<-gate
	}
	if panicky {
		panic("gateStore: injected panic")
	}
	return s.Store.AppendBatch(ctx, reqs)
}

func (s *gateStore) batchSizes() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.sizes...)
}

// waitEntered waits until an AppendBatch starts and returns its size.
func (s *gateStore) waitEntered(t *testing.T) int {
	t.Helper()
	select {
	case n := <-s.entered:
		return n
	case <-time.After(replyWait):
		t.Fatal("AppendBatch was not called")
		return 0
	}
}

// replyCollector is an actor that forwards every JournalWriteReply it gets
// to a channel, in arrival order. Requests sent with
// RequestWithCustomSender(journal, w, collector) are answered to it.
type replyCollector struct {
	pid     *actor.PID
	replies chan *messages.JournalWriteReply
}

func newReplyCollector(t *testing.T, sys *actor.ActorSystem) *replyCollector {
	t.Helper()
	c := &replyCollector{replies: make(chan *messages.JournalWriteReply, 1024)}
	c.pid = sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if r, ok := ctx.Message().(*messages.JournalWriteReply); ok {
			c.replies <- r
		}
	}))
	return c
}

func (c *replyCollector) next(t *testing.T) *messages.JournalWriteReply {
	t.Helper()
	select {
	case r := <-c.replies:
		return r
	case <-time.After(replyWait):
		t.Fatal("no JournalWriteReply arrived")
		return nil
	}
}

// userAppend is a fenced append of one user message.
func userAppend(conv string, expectedLast uint64, text string) *messages.AppendRequest {
	return &messages.AppendRequest{
		ConversationId: conv,
		ExpectedLast:   expectedLast,
		Events: []*messages.Event{{Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
			Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}},
		}}}},
	}
}

func write(id uint64, req *messages.AppendRequest) *messages.JournalWrite {
	return &messages.JournalWrite{RequestId: id, Request: req}
}

// requestWrite sends w with RequestFuture and returns the reply.
func requestWrite(t *testing.T, sys *actor.ActorSystem, pid *actor.PID, w *messages.JournalWrite) *messages.JournalWriteReply {
	t.Helper()
	res, err := sys.Root.RequestFuture(pid, w, replyWait).Result()
	require.NoError(t, err)
	r, ok := res.(*messages.JournalWriteReply)
	require.Truef(t, ok, "reply is %T", res)
	require.Equal(t, w.GetRequestId(), r.GetRequestId())
	return r
}

func replyErr(r *messages.JournalWriteReply) error {
	return journal.ErrorFromProto(r.GetReply().GetError())
}

func TestJournalWriteAndReply(t *testing.T) {
	sys := newTestSystem(t)
	store := memjournal.New(memjournal.Options{})
	pid := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{}))

	r := requestWrite(t, sys, pid, write(7, userAppend("a", 0, "one")))
	require.NoError(t, replyErr(r))
	require.Equal(t, uint64(1), r.GetReply().GetFirstSeq())
	require.Equal(t, uint64(1), r.GetReply().GetLastSeq())

	last, err := store.LastSeq(context.Background(), "a")
	require.NoError(t, err)
	require.Equal(t, uint64(1), last, "the write is in the Store when the reply arrives")

	// A write with no sender is committed; its reply is dropped.
	sys.Root.Send(pid, write(8, userAppend("a", 1, "two")))
	r = requestWrite(t, sys, pid, write(9, userAppend("a", 2, "three")))
	require.NoError(t, replyErr(r))
	require.Equal(t, uint64(3), r.GetReply().GetLastSeq())
}

func TestJournalRepliesOnlyAfterAppendBatchReturns(t *testing.T) {
	sys := newTestSystem(t)
	store := newGateStore()
	release := store.hold()
	pid := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{}))
	col := newReplyCollector(t, sys)

	sys.Root.RequestWithCustomSender(pid, write(1, userAppend("a", 0, "hi")), col.pid)
	require.Equal(t, 1, store.waitEntered(t))

	// A write without a request is answered at once (ErrInvalid). The
	// journal actor answers a requester in order, so if it had answered
	// write 1 early, that reply would come first.
	sys.Root.RequestWithCustomSender(pid, &messages.JournalWrite{RequestId: 2}, col.pid)
	r := col.next(t)
	require.Equal(t, uint64(2), r.GetRequestId(), "no reply to write 1 while AppendBatch is blocked")
	require.ErrorIs(t, replyErr(r), journal.ErrInvalid)

	release()
	r = col.next(t)
	require.Equal(t, uint64(1), r.GetRequestId())
	require.NoError(t, replyErr(r))
	require.Equal(t, uint64(1), r.GetReply().GetLastSeq())
}

func TestJournalGroupCommit(t *testing.T) {
	sys := newTestSystem(t)
	store := newGateStore()
	release := store.hold()
	pid := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{}))
	col := newReplyCollector(t, sys)

	sys.Root.RequestWithCustomSender(pid, write(1, userAppend("a", 0, "first")), col.pid)
	require.Equal(t, 1, store.waitEntered(t))

	// While commit 1 is in flight: writes of several conversations, two of
	// them to the same conversation, the second expecting the first's seq.
	// They are queued before commitDone, so they form the next batch.
	sys.Root.RequestWithCustomSender(pid, write(2, userAppend("b", 0, "b1")), col.pid)
	sys.Root.RequestWithCustomSender(pid, write(3, userAppend("c", 0, "c1")), col.pid)
	sys.Root.RequestWithCustomSender(pid, write(4, userAppend("a", 1, "a2")), col.pid)
	sys.Root.RequestWithCustomSender(pid, write(5, userAppend("a", 2, "a3")), col.pid)
	release()

	want := map[uint64]uint64{1: 1, 2: 1, 3: 1, 4: 2, 5: 3}
	for i := range 5 {
		r := col.next(t)
		require.Equal(t, uint64(i+1), r.GetRequestId(), "replies come in request order")
		require.NoError(t, replyErr(r))
		require.Equal(t, want[r.GetRequestId()], r.GetReply().GetLastSeq())
	}
	require.Equal(t, []int{1, 4}, store.batchSizes(), "one AppendBatch for everything that arrived during the first")
}

// TestJournalGroupCommitFailsOnlyTheBadRequests: requests of several
// conversations committed by one AppendBatch, some of them bad (a stale
// fence, an invalid request, a deleted conversation), each get their own
// result: the bad ones their own sentinel, the others land and succeed.
func TestJournalGroupCommitFailsOnlyTheBadRequests(t *testing.T) {
	sys := newTestSystem(t)
	store := newGateStore()
	ctx := t.Context()
	_, err := store.Store.Append(ctx, userAppend("x", 0, "x1"))
	require.NoError(t, err)
	_, err = store.Store.Append(ctx, userAppend("gone", 0, "g1"))
	require.NoError(t, err)
	require.NoError(t, store.Store.DeleteConversation(ctx, "gone"))
	release := store.hold()
	pid := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{}))
	col := newReplyCollector(t, sys)

	sys.Root.RequestWithCustomSender(pid, write(1, userAppend("a", 0, "first")), col.pid)
	require.Equal(t, 1, store.waitEntered(t))
	// Queued while commit 1 is in flight: they form the next batch.
	sys.Root.RequestWithCustomSender(pid, write(2, userAppend("b", 0, "b1")), col.pid)
	sys.Root.RequestWithCustomSender(pid, write(3, userAppend("x", 0, "stale writer")), col.pid)
	sys.Root.RequestWithCustomSender(pid, write(4, userAppend("c", 0, "c1")), col.pid)
	sys.Root.RequestWithCustomSender(pid, write(5, &messages.AppendRequest{ConversationId: "y", Events: []*messages.Event{{}}}), col.pid)
	sys.Root.RequestWithCustomSender(pid, write(6, userAppend("gone", 1, "g2")), col.pid)
	sys.Root.RequestWithCustomSender(pid, write(7, userAppend("d", 0, "d1")), col.pid)
	release()

	bad := map[uint64]error{3: journal.ErrConflict, 5: journal.ErrInvalid, 6: journal.ErrDeleted}
	for i := range 7 {
		r := col.next(t)
		id := r.GetRequestId()
		require.Equal(t, uint64(i+1), id, "replies come in request order")
		if want, ok := bad[id]; ok {
			require.ErrorIs(t, replyErr(r), want, "request %d", id)
			continue
		}
		require.NoError(t, replyErr(r), "request %d", id)
		require.Equal(t, uint64(1), r.GetReply().GetLastSeq(), "request %d", id)
	}
	require.Equal(t, []int{1, 6}, store.batchSizes(), "the bad requests were committed with the others")
	for conv, want := range map[string]uint64{"a": 1, "b": 1, "c": 1, "d": 1, "x": 1, "y": 0} {
		last, err := store.Store.LastSeq(ctx, conv)
		require.NoError(t, err)
		require.Equal(t, want, last, conv)
	}
}

func TestJournalMaxBatch(t *testing.T) {
	sys := newTestSystem(t)
	store := newGateStore()
	release := store.hold()
	pid := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{MaxBatch: 2}))
	col := newReplyCollector(t, sys)

	sys.Root.RequestWithCustomSender(pid, write(1, userAppend("c1", 0, "x")), col.pid)
	store.waitEntered(t)
	for i := uint64(2); i <= 6; i++ {
		sys.Root.RequestWithCustomSender(pid, write(i, userAppend("c"+string(rune('0'+i)), 0, "x")), col.pid)
	}
	release()
	for i := range 6 {
		r := col.next(t)
		require.Equal(t, uint64(i+1), r.GetRequestId())
		require.NoError(t, replyErr(r))
	}
	require.Equal(t, []int{1, 2, 2, 1}, store.batchSizes())
}

// TestJournalMaxBatchBytes: a group commit carries at most MaxBatchBytes
// of requests, in order, one request alone when it is larger; so a batch
// of valid requests is never more than a Store takes in one commit (they
// went into one AppendBatch, up to MaxBatch of them, whatever their
// bytes: on PostgreSQL, past its 1 GB limit, every write of the batch
// failed).
func TestJournalMaxBatchBytes(t *testing.T) {
	sys := newTestSystem(t)
	store := newGateStore()
	release := store.hold()
	text := strings.Repeat("x", 1000)
	one := proto.Size(userAppend("c2", 0, text))
	pid := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{MaxBatchBytes: 2*one + one/2}))
	col := newReplyCollector(t, sys)

	sys.Root.RequestWithCustomSender(pid, write(1, userAppend("c1", 0, text)), col.pid)
	store.waitEntered(t)
	for i := uint64(2); i <= 7; i++ {
		body := text
		if i == 4 {
			body = strings.Repeat("y", 5*len(text)) // over the budget alone
		}
		sys.Root.RequestWithCustomSender(pid, write(i, userAppend("c"+string(rune('0'+i)), 0, body)), col.pid)
	}
	release()
	for i := range 7 {
		r := col.next(t)
		require.Equal(t, uint64(i+1), r.GetRequestId(), "replies come in request order")
		require.NoError(t, replyErr(r))
	}
	require.Equal(t, []int{1, 2, 1, 2, 1}, store.batchSizes())
}

func TestJournalErrorsReachRequesters(t *testing.T) {
	sys := newTestSystem(t)
	store := memjournal.New(memjournal.Options{})
	pid := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{}))

	require.NoError(t, replyErr(requestWrite(t, sys, pid, write(1, userAppend("a", 0, "one")))))

	// A fence failure fails only its own request of the batch.
	r := requestWrite(t, sys, pid, write(2, userAppend("a", 0, "stale writer")))
	err := replyErr(r)
	require.ErrorIs(t, err, journal.ErrConflict)

	// An unfenced resolution of an unknown call is stale.
	r = requestWrite(t, sys, pid, write(3, &messages.AppendRequest{
		ConversationId: "a",
		Unfenced:       true,
		Resolutions: []*messages.ToolResolution{{
			ToolCallId: "nope",
			Status:     messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED,
		}},
	}))
	require.ErrorIs(t, replyErr(r), journal.ErrStale)

	// Invalid input.
	r = requestWrite(t, sys, pid, write(4, userAppend("", 0, "no id")))
	require.ErrorIs(t, replyErr(r), journal.ErrInvalid)

	// A closed Store fails every request with ErrClosed.
	require.NoError(t, store.Close())
	r = requestWrite(t, sys, pid, write(5, userAppend("a", 1, "too late")))
	require.ErrorIs(t, replyErr(r), journal.ErrClosed)
	require.False(t, errors.Is(replyErr(r), journal.ErrConflict))
}

// TestJournalRecoversStorePanic: a Store whose AppendBatch panics fails
// that batch's requests, the actor keeps working, and the batch is
// observed (JournalOptions.Observe: after each AppendBatch, whether it
// succeeded or not) like any other.
func TestJournalRecoversStorePanic(t *testing.T) {
	sys := newTestSystem(t)
	store := newGateStore()
	store.panicky = true
	var observed atomic.Int64
	pid := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{Observe: func(requests int, _ time.Duration) {
		observed.Add(int64(requests))
	}}))

	r := requestWrite(t, sys, pid, write(1, userAppend("a", 0, "boom")))
	require.Error(t, replyErr(r))
	require.Equal(t, messages.ErrorCode_ERROR_CODE_INTERNAL, r.GetReply().GetError().GetCode())
	require.Equal(t, int64(1), observed.Load(), "the panicked batch is observed")

	store.mu.Lock()
	store.panicky = false
	store.mu.Unlock()
	r = requestWrite(t, sys, pid, write(2, userAppend("a", 0, "fine")))
	require.NoError(t, replyErr(r), "the actor keeps working after a Store panic")
	require.Equal(t, uint64(1), r.GetReply().GetLastSeq())
	require.Equal(t, int64(2), observed.Load())
}

// TestJournalStopAnswersEveryRequester stops the actor with a commit in
// flight, a write received but not yet handed over, and writes still queued
// behind the stop.
func TestJournalStopAnswersEveryRequester(t *testing.T) {
	sys := newTestSystem(t)
	store := newGateStore()
	release := store.hold()
	pid := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{}))
	col := newReplyCollector(t, sys)

	sys.Root.RequestWithCustomSender(pid, write(1, userAppend("a", 0, "in flight")), col.pid)
	store.waitEntered(t)
	sys.Root.RequestWithCustomSender(pid, write(2, userAppend("b", 0, "received")), col.pid)
	stopped := sys.Root.PoisonFuture(pid) // a user message: write 2 is received first
	sys.Root.RequestWithCustomSender(pid, write(3, userAppend("c", 0, "queued")), col.pid)
	sys.Root.RequestWithCustomSender(pid, write(4, userAppend("d", 0, "queued")), col.pid)
	release() // Stopping waits for commit 1, then commits write 2

	got := map[uint64]error{}
	for range 4 {
		r := col.next(t)
		got[r.GetRequestId()] = replyErr(r)
	}
	require.NoError(t, got[1], "the commit in flight is finished")
	require.NoError(t, got[2], "a received write is committed before the actor exits")
	require.ErrorIs(t, got[3], journal.ErrClosed, "a write queued behind the stop is answered, not dropped")
	require.ErrorIs(t, got[4], journal.ErrClosed)
	require.NoError(t, stopped.Wait())

	for conv, want := range map[string]uint64{"a": 1, "b": 1, "c": 0, "d": 0} {
		last, err := store.Store.LastSeq(context.Background(), conv)
		require.NoError(t, err)
		require.Equalf(t, want, last, "conversation %s", conv)
	}

	// After the actor is gone, a request fails fast with a dead letter.
	_, err := sys.Root.RequestFuture(pid, write(5, userAppend("e", 0, "gone")), replyWait).Result()
	require.ErrorIs(t, err, actor.ErrDeadLetter)
}

// TestJournalStopWhileIdle checks a plain Stop with nothing in flight.
func TestJournalStopWhileIdle(t *testing.T) {
	sys := newTestSystem(t)
	store := memjournal.New(memjournal.Options{})
	pid := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{}))
	require.NoError(t, replyErr(requestWrite(t, sys, pid, write(1, userAppend("a", 0, "x")))))
	require.NoError(t, sys.Root.StopFuture(pid).Wait())
}

// TestJournalRestartKeepsRequests restarts the journal actor under a parent
// while a commit is in flight: every write is answered, and the new
// incarnation accepts writes.
func TestJournalRestartKeepsRequests(t *testing.T) {
	sys := newTestSystem(t)
	store := newGateStore()
	release := store.hold()
	col := newReplyCollector(t, sys)

	children := make(chan *actor.PID, 1)
	parent := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch ctx.Message().(type) {
		case *actor.Started:
			children <- ctx.Spawn(actors.NewJournal(store, actors.JournalOptions{}))
		case string:
			// What a OneForOne supervisor does on a Restart directive.
			ctx.(actor.Supervisor).RestartChildren(ctx.Children()...)
		}
	}))
	var pid *actor.PID
	select {
	case pid = <-children:
	case <-time.After(replyWait):
		t.Fatal("journal actor not spawned")
	}

	sys.Root.RequestWithCustomSender(pid, write(1, userAppend("a", 0, "in flight")), col.pid)
	store.waitEntered(t)
	sys.Root.RequestWithCustomSender(pid, write(2, userAppend("b", 0, "next")), col.pid)
	sys.Root.Send(parent, "restart")
	sys.Root.RequestWithCustomSender(pid, write(3, userAppend("a", 1, "after")), col.pid)
	release()

	got := map[uint64]*messages.JournalWriteReply{}
	for range 3 {
		r := col.next(t)
		got[r.GetRequestId()] = r
	}
	for id, r := range got {
		require.NoErrorf(t, replyErr(r), "write %d", id)
	}
	require.Equal(t, uint64(2), got[3].GetReply().GetLastSeq())

	r := requestWrite(t, sys, pid, write(4, userAppend("a", 2, "new incarnation")))
	require.NoError(t, replyErr(r))
	require.Equal(t, uint64(3), r.GetReply().GetLastSeq())
}

func TestJournalNilStorePanics(t *testing.T) {
	require.Panics(t, func() { actors.NewJournal(nil, actors.JournalOptions{}) })
}

// countingStore counts AppendBatch calls and the requests they carried.
type countingStore struct {
	journal.Store
	mu              sync.Mutex
	commits, writes int
}

func (s *countingStore) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	s.mu.Lock()
	s.commits++
	s.writes += len(reqs)
	s.mu.Unlock()
	return s.Store.AppendBatch(ctx, reqs)
}

// BenchmarkJournalGroupCommit sends writes from 64 concurrent requesters per
// CPU, each to its own conversation, through one journal actor on a
// memjournal. writes/commit shows how many requests each AppendBatch
// carried: with a durable Store, that is the number of writes per sync.
func BenchmarkJournalGroupCommit(b *testing.B) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	defer sys.Shutdown()
	store := &countingStore{Store: memjournal.New(memjournal.Options{})}
	pid := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{}))
	var next sync.Mutex
	conv := 0
	b.ReportAllocs()
	b.SetParallelism(64)
	b.RunParallel(func(pb *testing.PB) {
		next.Lock()
		conv++
		id := fmt.Sprintf("bench-%d", conv)
		next.Unlock()
		last := uint64(0)
		for pb.Next() {
			res, err := sys.Root.RequestFuture(pid, write(last+1, userAppend(id, last, "hello")), replyWait).Result()
			if err != nil {
				b.Error(err)
				return
			}
			if err := replyErr(res.(*messages.JournalWriteReply)); err != nil {
				b.Error(err)
				return
			}
			last++
		}
	})
	store.mu.Lock()
	defer store.mu.Unlock()
	if store.commits > 0 {
		b.ReportMetric(float64(store.writes)/float64(store.commits), "writes/commit")
	}
}

func TestJournalCommittedHookSeesOnlyCommittedRequestsBeforeTheReply(t *testing.T) {
	sys := newTestSystem(t)
	store := memjournal.New(memjournal.Options{})
	var mu sync.Mutex
	var seen []uint64 // expected_last of each committed request
	pid := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{
		Committed: func(req *messages.AppendRequest) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, req.GetExpectedLast())
		},
	}))
	committed := func() []uint64 {
		mu.Lock()
		defer mu.Unlock()
		return append([]uint64(nil), seen...)
	}

	require.NoError(t, replyErr(requestWrite(t, sys, pid, write(1, userAppend("a", 0, "one")))))
	require.Equal(t, []uint64{0}, committed(), "the hook ran before the reply")
	r := requestWrite(t, sys, pid, write(2, userAppend("a", 0, "conflict")))
	require.ErrorIs(t, replyErr(r), journal.ErrConflict)
	require.Equal(t, []uint64{0}, committed(), "a failed request is not reported")
	require.NoError(t, replyErr(requestWrite(t, sys, pid, write(3, userAppend("a", 1, "two")))))
	require.Equal(t, []uint64{0, 1}, committed())
}

// TestJournalBarrier: a barrier of a conversation with no write in the
// journal actor is answered at once; one of a conversation whose write is
// held in the Store is answered only after that write's reply, even when a
// later write of another conversation is answered first.
func TestJournalBarrier(t *testing.T) {
	sys := newTestSystem(t)
	store := newGateStore()
	release := store.hold()
	pid := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{}))
	got := make(chan string, 16)
	col := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *messages.JournalWriteReply:
			got <- fmt.Sprint("write ", m.GetRequestId())
		case *actors.JournalBarrierDone:
			got <- "barrier " + m.ConversationID
		}
	}))
	next := func() string {
		t.Helper()
		select {
		case s := <-got:
			return s
		case <-time.After(replyWait):
			t.Fatal("nothing arrived")
			return ""
		}
	}

	sys.Root.RequestWithCustomSender(pid, write(1, userAppend("a", 0, "held")), col)
	store.waitEntered(t)
	sys.Root.RequestWithCustomSender(pid, &actors.JournalBarrier{ConversationID: "a"}, col)
	sys.Root.RequestWithCustomSender(pid, &actors.JournalBarrier{ConversationID: "b"}, col)
	require.Equal(t, "barrier b", next(), "b has nothing in the journal actor")
	release()
	require.Equal(t, "write 1", next())
	require.Equal(t, "barrier a", next(), "a's barrier waits for a's write")
	require.Equal(t, "barrier a", func() string {
		sys.Root.RequestWithCustomSender(pid, &actors.JournalBarrier{ConversationID: "a"}, col)
		return next()
	}(), "once a's write is answered, a's barrier is answered at once")
}

// TestJournalPipelinedBatchesKeepConversationOrder: with MaxInflight 2, a
// second batch commits while the first is in flight, but a write whose
// conversation has a write in flight waits for it (so its fence holds and
// the conversation's replies keep their order).
func TestJournalPipelinedBatchesKeepConversationOrder(t *testing.T) {
	sys := newTestSystem(t)
	store := newGateStore()
	release1 := store.hold()
	pid := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{MaxInflight: 2}))
	col := newReplyCollector(t, sys)

	sys.Root.RequestWithCustomSender(pid, write(1, userAppend("a", 0, "a1")), col.pid)
	require.Equal(t, 1, store.waitEntered(t))
	// While a1 is in flight: a2 must wait for it; b1 may go at once.
	sys.Root.RequestWithCustomSender(pid, write(2, userAppend("a", 1, "a2")), col.pid)
	sys.Root.RequestWithCustomSender(pid, write(3, userAppend("b", 0, "b1")), col.pid)
	require.Equal(t, 1, store.waitEntered(t), "a second batch, of b1 alone, is in flight with the first")
	release2 := store.hold() // the batch of a2 waits on a gate of its own
	release1()
	r := col.next(t)
	require.NoError(t, replyErr(r))
	first := r.GetRequestId()
	r = col.next(t)
	require.NoError(t, replyErr(r))
	require.ElementsMatch(t, []uint64{1, 3}, []uint64{first, r.GetRequestId()}, "a1 and b1 are answered first")
	require.Equal(t, 1, store.waitEntered(t), "a2 goes once a1 landed")
	release2()
	r = col.next(t)
	require.Equal(t, uint64(2), r.GetRequestId())
	require.NoError(t, replyErr(r), "a2's fence held: it committed after a1")
	require.EqualValues(t, 2, r.GetReply().GetLastSeq())
	require.Equal(t, []int{1, 1, 1}, store.batchSizes())
}

// unknownForStore commits every request and reports those of conversation
// conv as journal.ErrUnknownOutcome.
type unknownForStore struct {
	*memjournal.Store
	conv string
}

func (s *unknownForStore) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	out := s.Store.AppendBatch(ctx, reqs)
	for i, req := range reqs {
		if out[i].Err == nil && req.GetConversationId() == s.conv {
			out[i] = journal.AppendResult{Err: fmt.Errorf("test: connection lost during COMMIT: %w", journal.ErrUnknownOutcome)}
		}
	}
	return out
}

// TestJournalUnknownHookSeesOnlyRequestsOfUnknownOutcome: Unknown hears of
// each request the Store reported journal.ErrUnknownOutcome, before its
// reply, and of no other; Committed hears of none of them.
func TestJournalUnknownHookSeesOnlyRequestsOfUnknownOutcome(t *testing.T) {
	sys := newTestSystem(t)
	store := &unknownForStore{Store: memjournal.New(memjournal.Options{}), conv: "u"}
	var mu sync.Mutex
	var committed, unknown []string
	pid := sys.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{
		Committed: func(req *messages.AppendRequest) {
			mu.Lock()
			defer mu.Unlock()
			committed = append(committed, req.GetConversationId())
		},
		Unknown: func(req *messages.AppendRequest) {
			mu.Lock()
			defer mu.Unlock()
			unknown = append(unknown, req.GetConversationId())
		},
	}))
	seen := func() ([]string, []string) {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(committed), slices.Clone(unknown)
	}
	require.NoError(t, replyErr(requestWrite(t, sys, pid, write(1, userAppend("a", 0, "one")))))
	require.ErrorIs(t, replyErr(requestWrite(t, sys, pid, write(2, userAppend("u", 0, "lost")))), journal.ErrUnknownOutcome)
	c, u := seen()
	require.Equal(t, []string{"a"}, c)
	require.Equal(t, []string{"u"}, u, "the hook ran before the reply")
	require.ErrorIs(t, replyErr(requestWrite(t, sys, pid, write(3, userAppend("a", 0, "conflict")))), journal.ErrConflict)
	c, u = seen()
	require.Equal(t, []string{"a"}, c)
	require.Equal(t, []string{"u"}, u, "another failure is not reported")
}
