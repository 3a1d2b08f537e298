package lazarus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// ErrLagged ends a subscription whose reader fell more than
// Options.SubscriberBuffer updates behind. Nothing is lost: subscribe again
// after the last seq received.
var ErrLagged = errors.New("lazarus: subscriber fell behind")

// ErrTooManySubscriptions refuses a subscription (Subscribe, SubscribeWith,
// the wait of SendAndWait) to a conversation that has
// Options.MaxSubscriptions open on this Runtime already: nothing is
// started (and SendAndWait writes nothing). A subscription frees its slot
// when its channel is closed; subscribe again once one has ended.
var ErrTooManySubscriptions = errors.New("lazarus: too many subscriptions to the conversation")

// historyPage is how many events a subscription reads from the Store at a
// time while it catches up, and historyPageBytes how many bytes of events
// (journal.EventQuery.MaxBytes; one event at least): 512 events of up to
// journal.MaxEventBytes would be 512 MiB.
const (
	historyPage      = 512
	historyPageBytes = 16 << 20
)

// hub fans the updates of every conversation out to its subscribers. The
// publisher (the journal actor, a conversation actor) never blocks: each
// subscription queues updates and its own pump goroutine delivers them,
// unless its channel has room (see subscription).
type hub struct {
	store journal.Store
	limit int
	// pageBytes bounds the bytes of a catch-up read (historyPageBytes).
	pageBytes int
	wg        sync.WaitGroup // pumps
	// life ends in close, before it waits for the pumps: pumps stop
	// delivering, and their reads of the Store run under it as well as
	// under their subscriber's context, so that a read that hangs (a
	// Store that does not answer) holds close up no longer than the Store
	// honours contexts.
	life    context.Context
	endLife context.CancelFunc

	// subs lists each conversation's subscriptions. A list is replaced,
	// never changed in place, so publish iterates it without copying.
	mu     sync.Mutex
	subs   map[string][]*subscription
	closed bool
	// answers holds, per conversation, the text deltas of the model call
	// in progress, so that a subscription that starts in the middle of an
	// answer gets the text streamed so far (see answerDeltas). Changed
	// under mu, in the same critical section that reads subs, so each
	// delta reaches a new subscription exactly once: in its snapshot of
	// answers, or live.
	answers map[string]answerDeltas
	// owns, once set (by dropUnowned, in cluster mode), says which
	// conversations this member owns by the latest membership it applied:
	// the hub keeps no answer in progress of any other (see dropUnowned).
	owns func(conversationID string) bool

	// maxSubs is Options.MaxSubscriptions (negative: no cap), and slots
	// how many subscriptions each conversation holds against it (see
	// take), under mu.
	maxSubs int
	slots   map[string]int

	// subscribers, if set, is told of every subscription's start (+1) and
	// end (-1) (Metrics.Subscribers).
	subscribers func(delta int)
}

// maxAnswerBytes bounds the deltas the hub keeps for one conversation's
// answer in progress: an answer is one event, so a valid one is never
// longer. Past it the hub keeps nothing more of that answer, and a
// subscription that starts then gets only the deltas published after it.
const maxAnswerBytes = journal.MaxEventBytes

// answerDeltas are the deltas published since the conversation's newest
// committed event or turn end: those of the model call in progress.
type answerDeltas struct {
	deltas []string
	bytes  int
	over   bool   // maxAnswerBytes was passed: nothing is kept until the answer ends
	agent  string // the agent whose model streams them (Update.Agent)
	after  uint64 // the newest event when their model call began (Update.After)
}

// outBuffer is the capacity of a subscription's channel (at most the
// subscriber buffer): room for the updates of a few turns, so that a reader
// busy for a moment does not cost a wake of the pump.
const outBuffer = 16

// A subscription's updates reach its reader in publish order, each once.
// The pump delivers them, except that an update published while the pump
// is idle (caught up, nothing queued or in hand) goes straight into out,
// if it has room: no goroutine of the hub is woken on the common path.
// Updates in out count against the subscriber buffer, as queued ones do.
type subscription struct {
	conv string
	slot bool // it holds a slot of conv (see hub.take)
	out  chan actors.Update
	wake chan struct{}

	mu sync.Mutex
	// after is the last seq delivered (or asked to start after). The pump
	// uses it without mu while it is not idle; push uses it, under mu,
	// only while the pump is idle.
	after uint64
	queue []actors.Update
	spare []actors.Update // the pump's emptied queue, reused by push
	// held is how many of the updates the pump took from the queue it
	// has not handed to out yet: they count against the subscriber
	// buffer too (set under mu, decremented by the pump alone).
	held   atomic.Int64
	lagged bool
	idle   bool // the pump is live and waiting, with nothing queued or in hand; out is open
	// ended, once set (see hub.end), is the last update's error: the pump
	// delivers what is queued, then it, then closes out.
	ended error
}

func newHub(store journal.Store, limit int) *hub {
	life, endLife := context.WithCancel(context.Background())
	return &hub{store: store, limit: limit, pageBytes: historyPageBytes, life: life, endLife: endLife,
		subs: map[string][]*subscription{}, answers: map[string]answerDeltas{}, maxSubs: -1, slots: map[string]int{}}
}

// take holds one of conv's Options.MaxSubscriptions slots, or refuses with
// ErrTooManySubscriptions when they are all held (ErrClosed after close).
// The holder frees it (free) before it closes its channel, so that a
// reader that saw its subscription end may subscribe again at once.
func (h *hub) take(conv string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed:
		return ErrClosed
	case h.maxSubs >= 0 && h.slots[conv] >= h.maxSubs:
		return fmt.Errorf("%w: %d open (Options.MaxSubscriptions)", ErrTooManySubscriptions, h.slots[conv])
	}
	h.slots[conv]++
	return nil
}

// free frees a slot of conv that take held.
func (h *hub) free(conv string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.slots[conv] <= 1 {
		delete(h.slots, conv)
		return
	}
	h.slots[conv]--
}

// cutByBytes reports whether a catch-up read that returned evs may have
// stopped at pageBytes before the end of its range: the next event, of up
// to journal.MaxEventBytes (and its seq), might not have fit.
func (h *hub) cutByBytes(evs []*messages.Event) bool {
	n := journal.MaxEventBytes + 16
	for _, ev := range evs {
		n += proto.Size(ev)
	}
	return n > h.pageBytes
}

// publishCommitted publishes the events of a committed append request. The
// journal actor calls it in commit order, so each conversation's events
// arrive in seq order.
func (h *hub) publishCommitted(req *messages.AppendRequest) {
	evs := req.GetEvents()
	if len(evs) == 0 {
		return
	}
	h.mu.Lock()
	subs := h.subs[req.GetConversationId()]
	// A model call starts after the newest event of its conversation is
	// committed, and no event is committed while it runs but its answer
	// (or a turn end), or a user message that cancelled it: either way its
	// deltas are done with.
	delete(h.answers, req.GetConversationId())
	h.mu.Unlock()
	for _, ev := range evs {
		u := actors.Update{ConversationID: req.GetConversationId(), Event: ev, TurnEnd: actors.TurnEndOf(ev)}
		for _, s := range subs {
			s.push(u, h.limit)
		}
	}
}

// publish is called by conversation actors for their retries and failed
// writes, and by their model-call goroutines for deltas, each in its own
// order. A retry (Update.Retry) ends nothing. A failed write ends the turn
// (failed; the activation stopped, and the next command revives it),
// unless it is a lost write race (ErrConflict): the runtime wakes the
// conversation again and the turn goes on. A turn that fails for good is
// a turn_failed event, published with the commits.
func (h *hub) publish(u actors.Update) {
	if u.Err != nil && u.TurnEnd == nil && u.Retry == nil && !errors.Is(u.Err, journal.ErrConflict) {
		u.TurnEnd = &actors.TurnEnd{Outcome: actors.TurnFailed, Err: u.Err}
	}
	h.mu.Lock()
	subs := h.subs[u.ConversationID]
	switch {
	case u.Err != nil || u.TurnEnd != nil || u.Restart:
		// A failed or cancelled turn (or a lost write race, or a newer
		// message: the turn runs again, with new deltas): the deltas so
		// far belong to no answer, and subscribers are told so.
		_, streamed := h.answers[u.ConversationID]
		delete(h.answers, u.ConversationID)
		u.Restart = streamed
		if !streamed && u.Err == nil && u.TurnEnd == nil {
			h.mu.Unlock()
			return // nothing was streamed: nothing to void
		}
	case u.Delta != "" && u.Event == nil:
		h.keepDelta(u)
	}
	h.mu.Unlock()
	for _, s := range subs {
		s.push(u, h.limit)
	}
}

// errLogAt marks an update that is for the pump alone, never delivered
// (see logAt): the log holds the events up to its After.
var errLogAt = errors.New("lazarus: the log holds the events up to After")

// logAt is told, by an activation of conversation conv whose revival read
// of the log ended at seq (actors.ConversationConfig.Revived), that the log
// holds the events up to seq. A write the Store reported
// journal.ErrUnknownOutcome that landed was never published (the journal
// actor publishes only the writes reported committed), and the activation
// revived after it may have nothing more to write: without a later commit
// of the conversation, whose gap the pump would fill, a subscription would
// never get it (the answer of a turn that is done, say). So each
// subscription that has not delivered up to seq reads the events up to it
// from the Store (bounded as its catch-up is, historyPage and
// pageBytes a read), in order with the updates published before: after
// them, and before anything the activation publishes (it calls this
// before its first step). None is delivered twice.
func (h *hub) logAt(conv string, seq uint64) {
	if seq == 0 {
		return
	}
	h.mu.Lock()
	subs := h.subs[conv]
	h.mu.Unlock()
	u := actors.Update{ConversationID: conv, After: seq, Err: errLogAt}
	for _, s := range subs {
		s.push(u, h.limit)
	}
}

// keepDelta adds the delta of u to the answer in progress of its
// conversation, or starts a new one with it when the one kept is another
// model call's (of another Update.Agent or Update.After). h.mu is held.
func (h *hub) keepDelta(u actors.Update) {
	if h.owns != nil && !h.owns(u.ConversationID) {
		return
	}
	a := h.answers[u.ConversationID] // stored by value: no allocation but the slice's
	if (len(a.deltas) > 0 || a.over) && (a.agent != u.Agent || a.after != u.After) {
		// Another model call's, though the call kept here ended without
		// anything dropping its deltas (a guard: an activation that
		// stops voids them, see supervisor.Config.Terminated in Open):
		// this one's answer starts afresh rather than after that one's.
		a = answerDeltas{}
	}
	switch {
	case a.over:
		return
	case a.bytes+len(u.Delta) > maxAnswerBytes:
		a = answerDeltas{over: true, agent: u.Agent, after: u.After}
	default:
		a.deltas = append(a.deltas, u.Delta)
		a.bytes += len(u.Delta)
		a.agent, a.after = u.Agent, u.After
	}
	h.answers[u.ConversationID] = a
}

// dropUnowned drops the answers in progress of the conversations owns
// rejects, and keeps none of theirs from now on: a cluster member applying
// a membership stops the activations of the conversations that moved away
// quietly (supervisor.StopUnowned), so no commit or turn end of theirs
// comes to drop the deltas a model call streamed before the stop, and
// each would be held until the process closed. No subscription here reads
// them (a subscriber follows the owner), and a delta published after the
// stop (by a call it has not cancelled yet) belongs to a call that is void.
func (h *hub) dropUnowned(owns func(conversationID string) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.owns = owns
	for conv := range h.answers {
		if !owns(conv) {
			delete(h.answers, conv)
		}
	}
}

func (s *subscription) push(u actors.Update, limit int) {
	s.mu.Lock()
	if u.Err == errLogAt && s.idle && u.After <= s.after {
		s.mu.Unlock()
		return // delivered up to it: nothing to read
	}
	// An event past the one after the last delivered (a write before it
	// was committed but reported failed, its outcome unknown, so never
	// published) goes to the pump, which reads the missing ones first.
	if s.idle && u.Err != errLogAt && (u.Event == nil || u.Event.GetSeq() <= s.after+1) { // so nothing is queued or in the pump's hands, and out is open
		if u.Event != nil && u.Event.GetSeq() <= s.after {
			s.mu.Unlock()
			return // delivered before, as history
		}
		if staleEnd(u, s.after) {
			s.mu.Unlock()
			return
		}
		select {
		case s.out <- u: // room in out, or a reader was waiting
			if u.Event != nil {
				s.after = u.Event.GetSeq()
			}
			s.mu.Unlock()
			return
		default:
		}
	}
	// The pump has work now: until it has delivered it, nothing may
	// overtake it.
	s.idle = false
	if !s.lagged {
		switch {
		case len(s.queue)+len(s.out)+int(s.held.Load()) >= limit:
			s.lagged = true
		case s.queue == nil && s.spare != nil:
			s.queue, s.spare = append(s.spare, u), nil
		default:
			s.queue = append(s.queue, u)
		}
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// subscribe registers first and reads history second, so no event can fall
// between the two; the pump drops live events it already read as history.
// In the same critical section it takes the deltas of the answer in
// progress, which the pump delivers after history and before the live
// updates: they were published before the registration, and every later
// delta is pushed to the subscription. The Store may hold the event that
// ended their model call before its commit is published (the journal
// actor publishes once the write has returned): the pump drops them if it
// starts, or its history ends, after the seq their call began at.
func (h *hub) subscribe(ctx context.Context, conv string, after uint64) (<-chan actors.Update, error) {
	return h.open(ctx, conv, after, false)
}

// open is subscribe; with slot, the subscription holds a slot of conv
// (take) that its pump frees before it closes the channel. If open fails,
// the caller still holds the slot.
func (h *hub) open(ctx context.Context, conv string, after uint64, slot bool) (<-chan actors.Update, error) {
	s := &subscription{conv: conv, slot: slot, out: make(chan actors.Update, min(outBuffer, h.limit)), wake: make(chan struct{}, 1), after: after}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	old := h.subs[conv]
	h.subs[conv] = append(old[:len(old):len(old)], s) // a new list: see subs
	var answer answerDeltas
	if a := h.answers[conv]; len(a.deltas) > 0 {
		answer = a
		answer.deltas = slices.Clone(a.deltas)
	}
	h.wg.Add(1)
	h.mu.Unlock()
	if h.subscribers != nil {
		h.subscribers(1)
	}
	go h.pump(ctx, s, answer)
	return s.out, nil
}

func (h *hub) pump(ctx context.Context, s *subscription, answer answerDeltas) {
	defer h.wg.Done()
	defer h.unsubscribe(s)
	defer close(s.out)
	if s.slot {
		defer h.free(s.conv) // before out is closed: see take
	}
	if h.subscribers != nil {
		// Before out is closed: a caller that has read out to its end
		// no longer counts this subscription (SendAndWait's own, say).
		defer h.subscribers(-1)
	}
	defer func() { // before out is closed: push must not send on it
		s.mu.Lock()
		s.idle = false
		s.mu.Unlock()
	}()
	emit := func(u actors.Update) bool {
		if staleEnd(u, s.after) {
			return true
		}
		if u.Event != nil {
			if u.Event.GetSeq() <= s.after {
				return true
			}
			s.after = u.Event.GetSeq()
		}
		select {
		case s.out <- u:
			return true
		case <-ctx.Done():
			return false
		case <-h.life.Done():
			return false
		}
	}
	// The Store is read under the subscriber's context and the hub's
	// life: close does not wait for a read that hangs.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(h.life, cancel)()
	// page reads from the Store the events after the last delivered and
	// before seq before; a failed read is reported to the subscriber (but
	// not one its own end or the hub's close cut) and ends the
	// subscription (false).
	page := func(before uint64) ([]*messages.Event, bool) {
		evs, err := h.store.Events(rctx, s.conv, journal.EventQuery{After: s.after, Before: before, MaxBytes: h.pageBytes})
		if err != nil {
			if rctx.Err() == nil {
				emit(actors.Update{ConversationID: s.conv, Err: err})
			}
			return nil, false
		}
		return evs, true
	}
	// fill delivers from the Store the events between the last delivered
	// and a live one at seq: the journal actor publishes only the writes
	// the Store reported committed, and one whose outcome was unknown
	// (ErrUnknownOutcome, a timeout) may have landed; the later commit,
	// fenced on it, shows it did, as does the revival read of the
	// activation woken after it (logAt: seq is one past the log's last
	// event it read). A range the Store no longer holds is passed over.
	fill := func(seq uint64) bool {
		for s.after+1 < seq {
			from := s.after
			evs, ok := page(min(seq, from+historyPage+1))
			if !ok {
				return false
			}
			for _, ev := range evs {
				if !emit(actors.Update{ConversationID: s.conv, Event: ev, TurnEnd: actors.TurnEndOf(ev)}) {
					return false
				}
			}
			if s.after == from {
				return true
			}
		}
		return true
	}
	// Catch up from the Store, up to the first event that arrived live:
	// from it on, the queue holds every event, in order with the deltas
	// published between them. (A slow read could otherwise deliver a
	// turn's answer from history before the deltas queued ahead of it.)
	var live uint64 // the seq of the first queued event, once there is one
catchUp:
	for {
		evs, ok := page(s.after + historyPage + 1)
		if !ok {
			return
		}
		for _, ev := range evs {
			if live == 0 {
				live = s.firstQueuedSeq()
			}
			if live != 0 && ev.GetSeq() >= live {
				break catchUp
			}
			if !emit(actors.Update{ConversationID: s.conv, Event: ev, TurnEnd: actors.TurnEndOf(ev)}) {
				return
			}
		}
		if len(evs) == 0 || len(evs) < historyPage && !h.cutByBytes(evs) {
			break
		}
	}
	// The answer in progress when the subscription started: its deltas
	// were published before it, so none of them is queued. Unless an
	// event after the seq its model call began at was delivered (or the
	// subscription started after one): the call is over, the event that
	// ended it written.
	for _, d := range answer.deltas {
		if s.after > answer.after {
			break
		}
		if !emit(actors.Update{ConversationID: s.conv, Delta: d, Agent: answer.agent, After: answer.after}) {
			return
		}
	}
	// Live: deliver what is queued, then wait for more.
	for {
		s.mu.Lock()
		queue, lagged, ended := s.queue, s.lagged, s.ended
		s.queue = nil
		s.idle = queue == nil && !lagged && ended == nil
		s.held.Store(int64(len(queue)))
		s.mu.Unlock()
		for _, u := range queue {
			if u.Err == errLogAt { // see logAt
				if !fill(u.After + 1) {
					return
				}
				s.held.Add(-1)
				continue
			}
			if u.Event != nil && u.Event.GetSeq() > s.after+1 && !fill(u.Event.GetSeq()) {
				return
			}
			if !emit(u) {
				return
			}
			s.held.Add(-1)
		}
		if queue != nil {
			clear(queue) // drop the references to delivered updates
			s.mu.Lock()
			if s.spare == nil {
				s.spare = queue[:0]
			}
			s.mu.Unlock()
		}
		if lagged {
			emit(actors.Update{ConversationID: s.conv, Err: ErrLagged})
			return
		}
		if ended != nil {
			emit(actors.Update{ConversationID: s.conv, Err: ended})
			return
		}
		select {
		case <-s.wake:
		case <-ctx.Done():
			return
		case <-h.life.Done():
			return
		}
	}
}

// staleEnd reports whether u is an end without an event that carries the
// position it ends at (Update.After: the cancelled end of a kill, with the
// log's last seq at the kill; the failed end of a write, with the last seq
// its activation held) and a subscription that has delivered the events up
// to after has gone past that seq: it has delivered an event written after
// it (read as history while the end waited in its queue, a write the
// killed actor had under way, a write reported of unknown outcome that
// landed, or a later activation's), so the end would read as the end of a
// turn it did not end. Its After is a position even at 0: the failed end
// of a conversation's first write (an empty log), or a kill's while that
// write was under way; no end of either kind reaches the hub without one
// (a cluster relays updates with After 0 past the hub, see
// updateToProto).
func staleEnd(u actors.Update, after uint64) bool {
	return u.Event == nil && u.TurnEnd != nil &&
		(u.TurnEnd.Outcome == actors.TurnCancelled || u.TurnEnd.Outcome == actors.TurnFailed) &&
		after > u.After
}

// firstQueuedSeq is the seq of the first event in the queue, or 0.
func (s *subscription) firstQueuedSeq() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, u := range s.queue {
		if u.Event != nil {
			return u.Event.GetSeq()
		}
	}
	return 0
}

func (h *hub) unsubscribe(s *subscription) {
	h.mu.Lock()
	var rest []*subscription
	for _, o := range h.subs[s.conv] {
		if o != s {
			rest = append(rest, o)
		}
	}
	if len(rest) == 0 {
		delete(h.subs, s.conv)
	} else {
		h.subs[s.conv] = rest
	}
	h.mu.Unlock()
}

// close ends every subscription, closing its channel; updates not yet read
// are dropped. It cuts the pumps' reads of the Store (their context ends)
// and waits for the pumps.
func (h *hub) close() {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		h.endLife()
	}
	h.mu.Unlock()
	h.wg.Wait()
}
