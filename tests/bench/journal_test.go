package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// countingStore counts the commits (AppendBatch calls) and the requests
// they carried.
type countingStore struct {
	journal.Store
	commits, requests atomic.Int64
}

// AppendBatch implements journal.EventLog, counting.
func (s *countingStore) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	s.commits.Add(1)
	s.requests.Add(int64(len(reqs)))
	return s.Store.AppendBatch(ctx, reqs)
}

// journalWriters is how many conversations write concurrently in
// BenchmarkJournal: as many as cmd/loadgen runs.
const journalWriters = 1024

// BenchmarkJournal compares, on pebblejournal on the real disk, 1,024
// conversations each appending one ~1 KiB event at a time (an op is one
// event, durable before the next):
//
//   - direct: each writer calls Store.Append itself (Pebble groups the
//     syncs of concurrent commits, but every append is its own commit);
//   - actor: each writer is an actor that sends its append to the journal
//     actor and waits for the reply, as a conversation actor does; the
//     journal actor commits whatever arrived during the previous commit as
//     one AppendBatch.
//
// It reports events/s and, for the journal actor, requests per commit.
func BenchmarkJournal(b *testing.B) {
	b.Run(fmt.Sprintf("direct/writers=%d", journalWriters), func(b *testing.B) {
		store := openStore(b)
		var budget atomic.Int64
		budget.Store(int64(b.N))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range journalWriters {
			conv := fmt.Sprintf("w%04d", i)
			ev := event(i)
			wg.Go(func() {
				<-start
				last := uint64(0)
				for budget.Add(-1) >= 0 {
					res, err := store.Append(context.Background(), &messages.AppendRequest{ConversationId: conv, ExpectedLast: last, Events: []*messages.Event{ev}})
					if err != nil {
						b.Error(err)
						return
					}
					last = res.LastSeq
				}
			})
		}
		b.ReportAllocs()
		b.ResetTimer()
		t0 := time.Now()
		close(start)
		wg.Wait()
		elapsed := time.Since(t0)
		b.StopTimer()
		reportRate(b, b.N, elapsed, "events/s")
	})
	b.Run(fmt.Sprintf("actor/writers=%d", journalWriters), func(b *testing.B) {
		benchJournalActor(b, actors.JournalOptions{})
	})
}

func event(seed int) *messages.Event {
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	return &messages.Event{Time: journal.Timestamp(time.Now()), Body: &messages.Event_UserMsg{UserMsg: userMessage(rng, 1000)}}
}

// writer is an actor appending one event at a time to its conversation
// through the journal actor, while budget lasts.
type writer struct {
	journal *actor.PID
	conv    string
	ev      *messages.Event
	last    uint64
	next    uint64
	budget  *atomic.Int64
	failed  func(error)
	done    func()
}

type goWrite struct{}

// Receive implements actor.Actor.
func (w *writer) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case goWrite:
		w.send(ctx)
	case *messages.JournalWriteReply:
		if err := journal.ErrorFromProto(m.GetReply().GetError()); err != nil {
			w.failed(err)
			w.done()
			return
		}
		w.last = m.GetReply().GetLastSeq()
		w.send(ctx)
	}
}

func (w *writer) send(ctx actor.Context) {
	if w.budget.Add(-1) < 0 {
		w.done()
		return
	}
	w.next++
	ctx.Request(w.journal, &messages.JournalWrite{RequestId: w.next, Request: &messages.AppendRequest{
		ConversationId: w.conv, ExpectedLast: w.last, Events: []*messages.Event{w.ev},
	}})
}

func benchJournalActor(b *testing.B, opts actors.JournalOptions) {
	store := &countingStore{Store: openStore(b)}
	sys := newSystem(b)
	jpid := sys.Root.Spawn(actors.NewJournal(store, opts))
	var budget atomic.Int64
	budget.Store(int64(b.N))
	var wg sync.WaitGroup
	wg.Add(journalWriters)
	pids := make([]*actor.PID, journalWriters)
	for i := range pids {
		w := &writer{journal: jpid, conv: fmt.Sprintf("w%04d", i), ev: event(i), budget: &budget,
			failed: func(err error) { b.Error(err) }, done: wg.Done}
		pids[i] = sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return w }))
	}
	b.ReportAllocs()
	b.ResetTimer()
	t0 := time.Now()
	for _, pid := range pids {
		sys.Root.Send(pid, goWrite{})
	}
	wg.Wait()
	elapsed := time.Since(t0)
	b.StopTimer()
	reportRate(b, b.N, elapsed, "events/s")
	if c := store.commits.Load(); c > 0 {
		b.ReportMetric(float64(store.requests.Load())/float64(c), "requests/commit")
	}
}

// BenchmarkStoreTurns measures pebblejournal's group commit on the writes
// of real turns, without actors: 1,024 conversations each write a turn
// as the conversation actor does, in four fenced appends carrying the
// fsm_state and status (the user message; the assistant message with its
// tool_call event and the pending row of the call; the tool result with
// the call's resolution; the final answer). Each round commits one of the
// four steps for every conversation in one AppendBatch. An op is one turn
// (5 events); it reports events/s.
func BenchmarkStoreTurns(b *testing.B) {
	store := openStore(b)
	rng := rand.New(rand.NewPCG(8, 9))
	last := make([]uint64, journalWriters)
	b.ReportAllocs()
	b.ResetTimer()
	t0 := time.Now()
	for done := 0; done < b.N; done += journalWriters {
		n := min(journalWriters, b.N-done)
		turns := make([][]*messages.Event, n)
		for i := range turns {
			turns[i] = turnLog(rng, fmt.Sprintf("s%04d", i), done/journalWriters, 1)
		}
		for step := range 4 {
			reqs := make([]*messages.AppendRequest, n)
			for i := range reqs {
				conv := fmt.Sprintf("s%04d", i)
				evs := turns[i]
				r := &messages.AppendRequest{ConversationId: conv, ExpectedLast: last[i],
					Status: messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE}
				call := evs[1].GetAssistantMsg().GetToolCalls()[0]
				switch step {
				case 0:
					r.Events = evs[:1]
				case 1:
					r.Events = evs[1:3]
					r.ToolCalls = []*messages.ToolCallRecord{{Id: call.GetId(), ConversationId: conv, Name: call.GetName(),
						Executor: messages.Executor_EXECUTOR_SERVER, Args: call.GetArguments()}}
				case 2:
					r.Events = evs[3:4]
					r.Resolutions = []*messages.ToolResolution{{ToolCallId: call.GetId(), Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED,
						Result: evs[3].GetToolResult().GetOutcome()}}
				case 3:
					r.Events = evs[4:]
					r.Status = messages.ConversationStatus_CONVERSATION_STATUS_IDLE
				}
				r.FsmState = &messages.FSMState{State: messages.AgentState_AGENT_STATE_IDLE, LastSeq: last[i] + uint64(len(r.Events))}
				reqs[i] = r
			}
			for i, res := range store.AppendBatch(context.Background(), reqs) {
				if res.Err != nil {
					b.Fatalf("step %d of %s: %v", step, reqs[i].GetConversationId(), res.Err)
				}
				last[i] = res.LastSeq
			}
		}
	}
	elapsed := time.Since(t0)
	b.StopTimer()
	reportRate(b, b.N*turnEvents, elapsed, "events/s")
}
