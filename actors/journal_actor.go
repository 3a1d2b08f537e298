package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// JournalOptions configures the journal actor. The zero value is valid.
type JournalOptions struct {
	// MaxBatch bounds the requests committed by one Store.AppendBatch.
	// Requests beyond it wait for the next commit. Default (zero or less):
	// 4096.
	MaxBatch int
	// MaxBatchBytes bounds the bytes (the requests' encodings, summed) one
	// Store.AppendBatch carries: requests beyond it wait for the next
	// commit, in order, so that a batch of valid requests is never more
	// than a Store takes in one commit (PostgreSQL refuses a parameter of
	// 1 GB). A request larger than it is committed alone. Default (zero or
	// less): journal.MaxAppendBytes.
	MaxBatchBytes int
	// Logger receives the actor's logs. Default: discard.
	Logger *slog.Logger
	// Committed, if set, is called on the actor's goroutine, in commit
	// order (of each conversation, when MaxInflight > 1), with every
	// request the Store committed, before its requester
	// is answered. It must not block. The runtime uses it to arm and cancel
	// the expiry actor's timers from the durable deadlines themselves, so
	// no kill of a conversation between its write and its next message can
	// leave a durable deadline unarmed. A panic of it is logged and
	// recovered: the request is answered all the same.
	Committed func(req *messages.AppendRequest)
	// Unknown, if set, is called as Committed is, with every request
	// whose commit the Store reported journal.ErrUnknownOutcome: it may
	// have landed, and then Committed never hears of it (a retry of it
	// finds it in the log, and writes nothing). The runtime counts such
	// requests (lazarus.Metrics.AppendUnknown). It must not block. A
	// panic of it is logged and recovered.
	Unknown func(req *messages.AppendRequest)
	// MaxInflight bounds the batches committing at once. Default (zero or
	// less): what the Store asks for through ConcurrentBatches, else 1.
	// At most MaxJournalInflight. With more than one,
	// a request waits (keeping its place) while a batch in flight holds a
	// request of its conversation, so each conversation's writes still
	// commit, and are answered, in the order they were received.
	MaxInflight int
	// Observe, if set, is called after each Store.AppendBatch (a group
	// commit) with the number of requests it carried and how long it took,
	// whether it succeeded, failed or panicked (lazarus.Metrics.Commit),
	// on the goroutine that called it (a committer, or the actor itself
	// while it stops). It must not block. A panic of it is logged and
	// recovered.
	Observe func(requests int, took time.Duration)
}

// ConcurrentBatches is implemented by a Store whose AppendBatch calls gain
// from running several at once (a networked store, where a commit waits on
// a round trip and a remote flush): it returns how many. The journal actor
// uses it as the default of JournalOptions.MaxInflight (at most
// MaxJournalInflight).
type ConcurrentBatches interface {
	ConcurrentBatches() int
}

const defaultJournalMaxBatch = 4096

// minSpreadBatch is the smallest batch that pending requests are spread
// into when several batches may be in flight: below it, a commit's fixed
// cost outweighs running side by side.
const minSpreadBatch = 32

func (o JournalOptions) withDefaults() JournalOptions {
	if o.MaxBatch <= 0 {
		o.MaxBatch = defaultJournalMaxBatch
	}
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = journal.MaxAppendBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	// A panic of a callback is logged and recovered (see callback).
	log := o.Logger
	if committed := o.Committed; committed != nil {
		o.Committed = func(req *messages.AppendRequest) {
			callback(log, "JournalOptions.Committed", func() { committed(req) })
		}
	}
	if unknown := o.Unknown; unknown != nil {
		o.Unknown = func(req *messages.AppendRequest) {
			callback(log, "JournalOptions.Unknown", func() { unknown(req) })
		}
	}
	if observe := o.Observe; observe != nil {
		o.Observe = func(requests int, took time.Duration) {
			callback(log, "JournalOptions.Observe", func() { observe(requests, took) })
		}
	}
	return o
}

// MaxJournalInflight caps JournalOptions.MaxInflight and what a Store asks
// for through ConcurrentBatches: the journal actor runs one committer
// goroutine per batch in flight.
const MaxJournalInflight = 64

// inflightFor returns MaxInflight, defaulted from store, at most
// MaxJournalInflight.
func (o JournalOptions) inflightFor(store journal.Store) int {
	if o.MaxInflight > 0 {
		return min(o.MaxInflight, MaxJournalInflight)
	}
	if c, ok := store.(ConcurrentBatches); ok && c.ConcurrentBatches() > 1 {
		return min(c.ConcurrentBatches(), MaxJournalInflight)
	}
	return 1
}

// NewJournal returns the Props of the journal actor: the single writer of
// store for this node. It panics if store is nil.
//
// # Protocol
//
// It receives *messages.JournalWrite, sent with Request or RequestFuture,
// and answers the sender with a *messages.JournalWriteReply carrying the
// same RequestId, only after the write is durable or has failed: never
// before Store.AppendBatch returned. A failed request carries its error in
// AppendReply.Error (journal.ErrorToProto; journal.ErrorFromProto gives back
// an error that errors.Is matches against the journal sentinels). A write
// without a sender is committed and its reply dropped. A JournalWrite
// without a Request is answered at once with ErrInvalid. It also answers
// *JournalBarrier (see there), after the last write of its conversation it
// received before the barrier. Other messages are ignored.
//
// # Group commit
//
// The actor owns JournalOptions.MaxInflight committer goroutines, started
// on Started, and one more that waits for them to end. Writes that arrive
// while a committer is free are handed to it at once; writes that arrive
// while every committer is busy are gathered and committed together, up to
// MaxBatch, by the next single Store.AppendBatch: one sync for many
// conversations. A committer reports each finished commit back to
// the actor with a message to itself (commitDone, a local Go value that never
// leaves the process); the actor then replies to every requester of that
// commit, in request order, and hands over the next batch. Store calls use
// context.Background(): a commit that started is always finished.
//
// # Stopping and restarts
//
// On Stopping (and on Restarting, when a supervisor restarts it) the actor
// finishes the commit in flight, commits what it had received but not yet
// handed over, replies to every requester, and stops the committer and
// waits for it to exit, before the handler returns. This blocks the actor
// for as long as those commits take. A JournalWrite still queued in the
// mailbox when the actor stops (protoactor drops such messages silently) is
// answered with an error wrapping journal.ErrClosed by the mailbox this actor
// is spawned with. Writes sent after the actor is gone reach protoactor's
// dead letters, which answer the sender with *actor.DeadLetterResponse
// (actor.ErrDeadLetter for a future). Messages queued during a restart stay
// in the mailbox and reach the new instance.
//
// Receive does not panic on any input, so a supervisor restart never loses
// the message being handled. A panic inside Store.AppendBatch is recovered
// on the committer goroutine and turned into an error reply for every
// request of that commit.
func NewJournal(store journal.Store, opts JournalOptions) *actor.Props {
	if store == nil {
		panic("actors: NewJournal with a nil Store")
	}
	opts = opts.withDefaults()
	opts.MaxInflight = opts.inflightFor(store)
	return actor.PropsFromProducer(func() actor.Actor {
		return &journalActor{store: store, opts: opts}
	}, actor.WithMailbox(newClosingMailbox))
}

// journalActor is the state of one incarnation of the journal actor. Only
// Receive touches it, except batch.results (see commitBatch).
type journalActor struct {
	store journal.Store
	opts  JournalOptions

	pending  []journalRequest // received, not yet handed to the committer
	received uint64           // journalRequest.n of the last request received
	// lastOf maps a conversation to the n of its last request received and
	// not yet answered; barriers maps such an n to the barriers waiting for
	// it to be answered.
	lastOf   map[string]uint64
	barriers map[uint64][]*actor.PID
	inflight map[*commitBatch]struct{} // handed to the committers, not yet answered
	// busy counts, per conversation, its requests in the batches in flight.
	busy   map[string]int
	work   chan *commitBatch
	done   chan struct{} // closed when every committer exited
	closed bool          // Stopping or Restarting was handled
}

// journalRequest is one received JournalWrite and whom to answer.
type journalRequest struct {
	sender *actor.PID // nil: nobody to answer
	id     uint64
	req    *messages.AppendRequest
	n      uint64 // the order in which this incarnation received it, from 1
	size   int    // proto.Size(req), counted against MaxBatchBytes
}

// JournalBarrier asks the journal actor to answer, with JournalBarrierDone,
// once every write of ConversationID it received before the barrier has
// been answered (at once if there is none). A reviving conversation sends
// it before reading its log, so that a write its killed predecessor left
// in the journal actor lands first: the revival then reads it, instead of
// building on the log without it and losing its next write to a fence.
// It is a local message (a Go value that never leaves the process), sent
// with Request.
type JournalBarrier struct{ ConversationID string }

// JournalBarrierDone answers JournalBarrier.
type JournalBarrierDone struct{ ConversationID string }

// commitBatch is one Store.AppendBatch. The actor builds it and hands it to
// the committer, which sets results and then sends commitDone; the actor
// reads results only after receiving commitDone or after the committer
// exited, so the hand-off is ordered by the mailbox or by the done channel.
type commitBatch struct {
	reqs    []journalRequest
	appends []*messages.AppendRequest
	results []journal.AppendResult
}

// commitDone is the committer's report that batch was committed (or
// failed). It is a local-only message: the journal actor sends it to itself
// and it never crosses a process boundary, so it is a plain Go value, not a
// protobuf message.
type commitDone struct{ batch *commitBatch }

// Receive implements actor.Actor.
func (a *journalActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.start(ctx)
	case *messages.JournalWrite:
		a.onWrite(ctx, msg)
	case *JournalBarrier:
		a.onBarrier(ctx, msg)
	case *commitDone:
		if _, ok := a.inflight[msg.batch]; !ok {
			return // from an earlier incarnation, already answered when it stopped
		}
		a.land(msg.batch)
		a.answer(ctx, msg.batch)
		a.handOver()
	case *actor.Stopping:
		a.shutdown(ctx, "stopping")
	case *actor.Restarting:
		a.shutdown(ctx, "restarting")
	case *actor.Stopped:
		a.shutdown(ctx, "stopped")
	}
}

func (a *journalActor) start(ctx actor.Context) {
	n := a.opts.MaxInflight
	a.work = make(chan *commitBatch, n) // at most n batches are in flight
	a.done = make(chan struct{})
	a.inflight = make(map[*commitBatch]struct{}, n)
	a.busy = make(map[string]int)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			commitLoop(a.store, a.opts.Logger, a.opts.Observe, ctx.ActorSystem(), ctx.Self(), a.work)
		}()
	}
	go func() { wg.Wait(); close(a.done) }()
}

// land removes b from the batches in flight.
func (a *journalActor) land(b *commitBatch) {
	delete(a.inflight, b)
	for _, r := range b.reqs {
		conv := r.req.GetConversationId()
		if a.busy[conv]--; a.busy[conv] <= 0 {
			delete(a.busy, conv)
		}
	}
}

func (a *journalActor) onWrite(ctx actor.Context, w *messages.JournalWrite) {
	r := journalRequest{sender: ctx.Sender(), id: w.GetRequestId(), req: w.GetRequest()}
	switch {
	case r.req == nil:
		replyWrite(ctx, r, journal.AppendResult{Err: journal.Invalidf("actors: journal write %d without a request", r.id)})
	case a.closed || a.work == nil:
		replyWrite(ctx, r, journal.AppendResult{Err: fmt.Errorf("actors: journal actor stopped: %w", journal.ErrClosed)})
	default:
		a.received++
		r.n = a.received
		r.size = proto.Size(r.req)
		if a.lastOf == nil {
			a.lastOf = make(map[string]uint64)
		}
		a.lastOf[r.req.GetConversationId()] = r.n
		a.pending = append(a.pending, r)
		a.handOver()
	}
}

// onBarrier answers b once the last write of its conversation received so
// far is answered: at once if there is none.
func (a *journalActor) onBarrier(ctx actor.Context, b *JournalBarrier) {
	sender := ctx.Sender()
	if sender == nil {
		return
	}
	n, waiting := a.lastOf[b.ConversationID]
	if !waiting {
		ctx.Send(sender, &JournalBarrierDone{ConversationID: b.ConversationID})
		return
	}
	if a.barriers == nil {
		a.barriers = make(map[uint64][]*actor.PID)
	}
	a.barriers[n] = append(a.barriers[n], sender)
}

// take removes up to MaxBatch requests, of at most MaxBatchBytes together
// (one request at least), from pending, in order, skipping those whose
// conversation has a request in a batch in flight (they keep their place).
// It stops at the first request that would take the batch past
// MaxBatchBytes, so no request is committed before one of its conversation
// received earlier. It returns nil if it took none.
func (a *journalActor) take() *commitBatch {
	limit := a.opts.MaxBatch
	if free := a.opts.MaxInflight - len(a.inflight); free > 1 {
		// Spread what is pending over the free slots, so that the batches
		// commit side by side (on a server, in as many backends) rather
		// than one large batch holding every conversation.
		limit = min(limit, max(minSpreadBatch, (len(a.pending)+free-1)/free))
	}
	if len(a.busy) == 0 {
		n, size := 0, 0
		for n < min(len(a.pending), limit) {
			if n > 0 && size+a.pending[n].size > a.opts.MaxBatchBytes {
				break
			}
			size += a.pending[n].size
			n++
		}
		if n == 0 {
			return nil
		}
		b := &commitBatch{reqs: a.pending[:n:n], appends: make([]*messages.AppendRequest, n)}
		for i, r := range b.reqs {
			b.appends[i] = r.req
		}
		a.pending = a.pending[n:]
		if len(a.pending) == 0 {
			a.pending = nil // let the next batch start a fresh array
		}
		return b
	}
	b := &commitBatch{}
	var rest []journalRequest
	size, full := 0, false
	for _, r := range a.pending {
		if !full && len(b.reqs) > 0 && size+r.size > a.opts.MaxBatchBytes {
			full = true
		}
		if !full && len(b.reqs) < limit && a.busy[r.req.GetConversationId()] == 0 {
			b.reqs = append(b.reqs, r)
			b.appends = append(b.appends, r.req)
			size += r.size
			continue
		}
		rest = append(rest, r)
	}
	a.pending = rest
	if len(b.reqs) == 0 {
		return nil
	}
	return b
}

// handOver gives the committers the next batches, while fewer than
// MaxInflight are in flight and pending holds requests they may take.
func (a *journalActor) handOver() {
	for !a.closed && len(a.inflight) < a.opts.MaxInflight && len(a.pending) > 0 {
		b := a.take()
		if b == nil {
			return
		}
		a.inflight[b] = struct{}{}
		for _, r := range b.reqs {
			a.busy[r.req.GetConversationId()]++
		}
		a.work <- b // never blocks: capacity MaxInflight, at most that many in flight
	}
}

func (a *journalActor) answer(ctx actor.Context, b *commitBatch) {
	for i, r := range b.reqs {
		if a.opts.Committed != nil && b.results[i].Err == nil {
			a.opts.Committed(r.req)
		}
		if a.opts.Unknown != nil && errors.Is(b.results[i].Err, journal.ErrUnknownOutcome) {
			a.opts.Unknown(r.req)
		}
		replyWrite(ctx, r, b.results[i])
		conv := r.req.GetConversationId()
		if a.lastOf[conv] == r.n {
			delete(a.lastOf, conv)
		}
		if waiting, ok := a.barriers[r.n]; ok {
			delete(a.barriers, r.n)
			for _, pid := range waiting {
				ctx.Send(pid, &JournalBarrierDone{ConversationID: conv})
			}
		}
	}
}

// shutdown finishes everything this incarnation accepted and answers it,
// then stops the committer and waits for it. It runs once.
func (a *journalActor) shutdown(ctx actor.Context, why string) {
	if a.closed {
		return
	}
	a.closed = true
	if a.work != nil {
		close(a.work)
		<-a.done // the committers finish the batches in flight, if any, and exit
	}
	n := len(a.pending)
	// The batches in flight held no two requests of one conversation, so
	// the order in which they are answered does not matter.
	for b := range a.inflight {
		a.land(b)
		n += len(b.reqs)
		a.answer(ctx, b) // the committer set b.results before done closed
	}
	for len(a.pending) > 0 {
		b := a.take()
		b.results = safeAppendBatch(a.store, a.opts.Logger, a.opts.Observe, b.appends)
		a.answer(ctx, b)
	}
	if n > 0 {
		a.opts.Logger.Info("actors: journal actor finished its writes before exiting", "reason", why, "requests", n)
	}
}

// replyWrite answers one request, unless it has no sender.
func replyWrite(ctx actor.Context, r journalRequest, res journal.AppendResult) {
	if r.sender == nil {
		return
	}
	ctx.Send(r.sender, &messages.JournalWriteReply{
		RequestId: r.id,
		Reply: &messages.AppendReply{
			FirstSeq: res.FirstSeq,
			LastSeq:  res.LastSeq,
			Error:    journal.ErrorToProto(writeErr(res.Err)),
		},
	})
}

// commitLoop is a committer goroutine. It is owned by one incarnation of
// the journal actor, which closes work to stop it and waits on done.
func commitLoop(store journal.Store, log *slog.Logger, observe func(int, time.Duration), system *actor.ActorSystem, self *actor.PID, work <-chan *commitBatch) {
	for b := range work {
		b.results = safeAppendBatch(store, log, observe, b.appends)
		system.Root.Send(self, &commitDone{batch: b})
	}
}

// safeAppendBatch calls store.AppendBatch and always returns one result per
// request: a panic of the Store, or a result slice of the wrong length, turns
// into an error result.
func safeAppendBatch(store journal.Store, log *slog.Logger, observe func(int, time.Duration), reqs []*messages.AppendRequest) (results []journal.AppendResult) {
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			log.Error("actors: Store.AppendBatch panicked", "panic", r, "requests", len(reqs), "stack", string(debug.Stack()))
			results = failedResults(reqs, nil, fmt.Errorf("actors: Store.AppendBatch panicked: %v", r))
		}
		// Observed whether it succeeded, failed or panicked.
		took := time.Since(start)
		if observe != nil {
			observe(len(reqs), took)
		}
		log.Debug("actors: journal commit", "requests", len(reqs), "took", took)
	}()
	results = store.AppendBatch(context.Background(), reqs)
	if len(results) != len(reqs) {
		log.Error("actors: Store.AppendBatch returned the wrong number of results", "requests", len(reqs), "results", len(results))
		results = failedResults(reqs, results, fmt.Errorf("actors: Store.AppendBatch returned %d results for %d requests", len(results), len(reqs)))
	}
	return results
}

// failedResults returns one result per request: got[i] where there is one, err
// for the rest.
func failedResults(reqs []*messages.AppendRequest, got []journal.AppendResult, err error) []journal.AppendResult {
	out := make([]journal.AppendResult, len(reqs))
	n := copy(out, got)
	for i := n; i < len(out); i++ {
		out[i] = journal.AppendResult{Err: err}
	}
	return out
}

// newClosingMailbox is the journal actor's mailbox: protoactor's unbounded
// mailbox, except that once the actor has handled a Stop, a JournalWrite
// still queued is answered with an error wrapping journal.ErrClosed instead
// of being dropped silently. A stopped actor drops queued user messages
// (actorContext.InvokeUserMessage returns early), so the mailbox is the last
// place that sees them.
func newClosingMailbox() actor.Mailbox {
	return &closingMailbox{Mailbox: actor.Unbounded()()}
}

type closingMailbox struct {
	actor.Mailbox
}

// RegisterHandlers implements actor.Mailbox by wrapping the invoker.
func (m *closingMailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.Mailbox.RegisterHandlers(&closingInvoker{MessageInvoker: invoker}, dispatcher)
}

// closingInvoker sits between the mailbox and the actor context. The mailbox
// calls it from one goroutine at a time, so stopped needs no lock.
type closingInvoker struct {
	actor.MessageInvoker
	stopped bool
}

func (i *closingInvoker) InvokeSystemMessage(msg any) {
	i.MessageInvoker.InvokeSystemMessage(msg)
	if _, ok := msg.(*actor.Stop); ok {
		i.stopped = true
	}
}

func (i *closingInvoker) InvokeUserMessage(msg any) {
	if !i.stopped {
		i.MessageInvoker.InvokeUserMessage(msg)
		return
	}
	sender := actor.UnwrapEnvelopeSender(msg)
	sys, ok := i.MessageInvoker.(interface{ ActorSystem() *actor.ActorSystem })
	if sender == nil || !ok {
		return
	}
	if b, ok := actor.UnwrapEnvelopeMessage(msg).(*JournalBarrier); ok {
		// Everything this incarnation received was answered when it
		// stopped: nothing of the conversation is left to wait for.
		sys.ActorSystem().Root.Send(sender, &JournalBarrierDone{ConversationID: b.ConversationID})
		return
	}
	w, ok := actor.UnwrapEnvelopeMessage(msg).(*messages.JournalWrite)
	if !ok {
		return
	}
	sys.ActorSystem().Root.Send(sender, &messages.JournalWriteReply{
		RequestId: w.GetRequestId(),
		Reply: &messages.AppendReply{Error: journal.ErrorToProto(
			fmt.Errorf("actors: journal actor stopped before it received write %d: %w", w.GetRequestId(), journal.ErrClosed))},
	})
}
