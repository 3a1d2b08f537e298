package crash

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
)

// tortureSeed returns the seed of a randomized test and logs it.
func tortureSeed(t *testing.T) *rand.Rand {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, 0x746f727475726521))
}

// jostle yields the processor a random number of times: a cheap way to
// vary the interleaving of goroutines that start together.
func jostle(n int) {
	for range n {
		runtime.Gosched()
	}
}

// resolver is one contender for a pending call: the status and result it
// writes.
type resolver struct {
	status messages.ToolCallStatus
	result *messages.ToolOutcome
}

// TestTortureResolutionRaces races, 10,000 times each, an expiry against a
// late human answer and two clicks of one answer, at the level the runtime
// races them: both contenders send the journal actor the unfenced
// resolution write that Runtime.Resolve and the expiry actor send, and the
// journal actor commits them to the Store (Pebble on an in-memory
// filesystem), in the same group commit or in different ones. Starts are
// jostled at random. Each time exactly one contender wins, the other gets
// journal.ErrStale, and the row holds the winner's status and result with
// its deadline gone.
func TestTortureResolutionRaces(t *testing.T) {
	const trials = 10000
	rng := tortureSeed(t)
	store, err := pebblejournal.Open("db", pebblejournal.Options{FS: vfs.NewMem()})
	require.NoError(t, err)
	defer func() { require.NoError(t, store.Close()) }()
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	defer system.Shutdown()
	jpid := system.Root.Spawn(actors.NewJournal(store, actors.JournalOptions{}))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	expired := resolver{messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, actors.ExpiredOutcome()}
	answer := func(n int) resolver {
		return resolver{messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED,
			&messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: fmt.Sprintf(`{"click":%d}`, n)}}}
	}
	races := []struct {
		name string
		a, b resolver
	}{
		{"expiry vs late answer", expired, answer(1)},
		{"double click", answer(1), answer(2)},
	}
	for _, race := range races {
		t.Run(race.name, func(t *testing.T) {
			ids := pendingCalls(t, store, strings.ReplaceAll(race.name, " ", "-"), trials)
			jostles := make([][2]int, trials)
			firsts := make([]bool, trials)
			for i := range jostles {
				jostles[i] = [2]int{rng.IntN(8), rng.IntN(8)}
				firsts[i] = rng.IntN(2) == 0
			}
			var wins [2]atomic.Int64
			work := make(chan int)
			var wg sync.WaitGroup
			for range 32 {
				wg.Go(func() {
					for i := range work {
						contenders := [2]resolver{race.a, race.b}
						if firsts[i] {
							contenders[0], contenders[1] = contenders[1], contenders[0]
						}
						errs := [2]error{}
						start := make(chan struct{})
						var both sync.WaitGroup
						for k := range 2 {
							both.Go(func() {
								<-start
								jostle(jostles[i][k])
								errs[k] = resolveThroughJournal(system, jpid, ids[i].conv, ids[i].id, contenders[k])
							})
						}
						close(start)
						both.Wait()
						winner := -1
						for k, err := range errs {
							switch {
							case err == nil && winner < 0:
								winner = k
							case err == nil:
								t.Errorf("trial %d: both contenders won", i)
							case !errors.Is(err, journal.ErrStale):
								t.Errorf("trial %d: the loser got %v, not ErrStale", i, err)
							}
						}
						if winner < 0 {
							t.Errorf("trial %d: nobody won: %v", i, errs)
							continue
						}
						row, err := store.ToolCall(ctx, ids[i].id)
						if err != nil {
							t.Errorf("trial %d: %v", i, err)
							continue
						}
						w := contenders[winner]
						if row.GetStatus() != w.status || !proto.Equal(row.GetResult(), w.result) {
							t.Errorf("trial %d: the row holds %v %v, the winner wrote %v %v", i, row.GetStatus(), row.GetResult(), w.status, w.result)
						}
						if w == race.a {
							wins[0].Add(1)
						} else {
							wins[1].Add(1)
						}
					}
				})
			}
			for i := range trials {
				work <- i
			}
			close(work)
			wg.Wait()
			var left int
			require.NoError(t, store.Deadlines(ctx, time.Time{}, func(d *messages.Deadline) error {
				if strings.HasPrefix(d.GetConversationId(), strings.ReplaceAll(race.name, " ", "-")) {
					left++
				}
				return nil
			}))
			require.Zero(t, left, "every resolution removed its call's deadline")
			t.Logf("%d trials: the first contender won %d times, the second %d", trials, wins[0].Load(), wins[1].Load())
		})
	}
}

type callRef struct{ conv, id string }

// pendingCalls writes n pending human calls, each with a deadline, in
// conversations named prefix-k, 100 calls to a write.
func pendingCalls(t *testing.T, s journal.Store, prefix string, n int) []callRef {
	t.Helper()
	const perAppend = 100
	refs := make([]callRef, 0, n)
	at := journal.Timestamp(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	for k := 0; len(refs) < n; k++ {
		conv := fmt.Sprintf("%s-%d", prefix, k)
		am := &messages.AssistantMessage{}
		req := &messages.AppendRequest{ConversationId: conv}
		var calls []*messages.Event
		for j := 0; j < perAppend && len(refs) < n; j++ {
			id := actors.NewToolCallID()
			tc := &messages.ToolCall{Id: id, Name: toolApprove, Arguments: `{}`}
			am.ToolCalls = append(am.ToolCalls, tc)
			calls = append(calls, &messages.Event{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: tc, Executor: messages.Executor_EXECUTOR_HUMAN}}})
			req.ToolCalls = append(req.ToolCalls, &messages.ToolCallRecord{Id: id, ConversationId: conv, Name: toolApprove,
				Executor: messages.Executor_EXECUTOR_HUMAN, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, Args: `{}`, Deadline: at})
			req.Schedule = append(req.Schedule, &messages.Deadline{ConversationId: conv, ToolCallId: id, At: at})
			refs = append(refs, callRef{conv: conv, id: id})
		}
		req.Events = append([]*messages.Event{{Body: &messages.Event_AssistantMsg{AssistantMsg: am}}}, calls...)
		_, err := s.Append(context.Background(), req)
		require.NoError(t, err)
	}
	return refs
}

// resolveThroughJournal sends the journal actor the write Runtime.Resolve
// and the expiry actor send, and waits for its reply.
func resolveThroughJournal(system *actor.ActorSystem, jpid *actor.PID, conv, id string, r resolver) error {
	req := &messages.AppendRequest{ConversationId: conv, Unfenced: true,
		Status: messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE,
		Resolutions: []*messages.ToolResolution{{ToolCallId: id, Status: r.status, Result: r.result,
			At: journal.Timestamp(time.Now())}}}
	res, err := system.Root.RequestFuture(jpid, &messages.JournalWrite{RequestId: 1, Request: req}, time.Minute).Result()
	if err != nil {
		return err
	}
	return journal.ErrorFromProto(res.(*messages.JournalWriteReply).GetReply().GetError())
}

// humanOnly is a Runtime with one human tool, a scripted model and a
// manual clock.
type humanOnly struct {
	rt    *lazarus.Runtime
	model *scripted.Model
	clock *actorstest.ManualClock
	store journal.Store
}

func newHumanOnly(t *testing.T, store journal.Store, idle time.Duration) *humanOnly {
	h := &humanOnly{model: scripted.New(scripted.Options{}), clock: actorstest.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)), store: store}
	rt, err := lazarus.Open(lazarus.Options{
		Store: store, Model: h.model, Clock: h.clock, IdleTimeout: idle,
		Tools: []agent.Tool{{Name: toolApprove, Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Hour}},
		// The races move the clock an hour at once while other
		// conversations' model calls may be in flight: past ModelTimeout,
		// which would end such a call and leave its retry waiting for a
		// clock nobody moves again.
		ModelTimeout: -1,
	})
	require.NoError(t, err)
	h.rt = rt
	t.Cleanup(func() { require.NoError(t, closeWithin(t, "Runtime.Close", rt.Close)) })
	return h
}

// suspend sends a message to conv whose answer is a human call, and
// returns the call's id once the conversation is suspended.
func (h *humanOnly) suspend(ctx context.Context, conv string) (string, error) {
	h.model.Push(conv, scripted.Reply("", scripted.Call(toolApprove, `{}`)), scripted.Text("after"))
	sub, err := h.rt.Subscribe(ctx, conv, 0)
	if err != nil {
		return "", err
	}
	if _, err := h.rt.Send(ctx, conv, "approve?", agent.Scope{UserID: "u"}); err != nil {
		return "", err
	}
	for u := range sub {
		if p := u.Event.GetSuspension().GetPending(); len(p) == 1 {
			return p[0].GetToolCallId(), nil
		}
	}
	return "", fmt.Errorf("conversation %q never suspended: %w", conv, ctx.Err())
}

// settledHistory waits until conv's log ends with the model's final answer
// and returns it.
func (h *humanOnly) settledHistory(ctx context.Context, conv string) ([]*messages.Event, error) {
	sub, err := h.rt.Subscribe(ctx, conv, 0)
	if err != nil {
		return nil, err
	}
	for u := range sub {
		if u.Event != nil && isFinal(u.Event) {
			return h.rt.History(ctx, conv, 0, 0)
		}
	}
	return nil, fmt.Errorf("conversation %q never settled: %w", conv, ctx.Err())
}

// TestTortureResolutionRacesEndToEnd runs the same races through the
// Runtime, 200 times each: a suspended conversation's deadline passes
// (Advance of a manual clock, which also passivates idle conversations)
// while a human answers it, and two clicks answer one call at once. Twenty
// conversations race at a time, with jostled starts. Each time exactly one
// resolution is recorded, in the row, in the log (one resolution event,
// one tool_result) and in what the model sees next, and the loser (if it
// is Resolve) gets journal.ErrStale.
func TestTortureResolutionRacesEndToEnd(t *testing.T) {
	const trials, parallel = 200, 20
	rng := tortureSeed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h := newHumanOnly(t, memjournal.New(memjournal.Options{}), 30*time.Minute)
	for _, expiry := range []bool{true, false} {
		name := "double click"
		if expiry {
			name = "expiry vs late answer"
		}
		t.Run(name, func(t *testing.T) {
			var userWins, systemWins int
			for round := 0; round < trials/parallel; round++ {
				convs := make([]string, parallel)
				ids := make([]string, parallel)
				for i := range convs {
					convs[i] = fmt.Sprintf("%s-%d-%d", strings.ReplaceAll(name, " ", "-"), round, i)
					id, err := h.suspend(ctx, convs[i])
					require.NoError(t, err)
					ids[i] = id
				}
				clicks := 1
				if !expiry {
					clicks = 2
				}
				errs := make([][]error, parallel)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for i := range convs {
					errs[i] = make([]error, clicks)
					for k := range clicks {
						n := rng.IntN(16)
						wg.Go(func() {
							<-start
							jostle(n)
							errs[i][k] = h.rt.Resolve(ctx, ids[i], fmt.Sprintf(`{"click":%d}`, k), agent.Scope{UserID: "u"})
						})
					}
				}
				if expiry {
					n := rng.IntN(64)
					wg.Go(func() {
						<-start
						jostle(n)
						h.clock.Advance(time.Hour)
					})
				}
				close(start)
				wg.Wait()
				for i, conv := range convs {
					evs, err := h.settledHistory(ctx, conv)
					require.NoError(t, err)
					won := 0
					for _, err := range errs[i] {
						if err == nil {
							won++
						} else {
							require.ErrorIs(t, err, journal.ErrStale, "conversation %q", conv)
						}
					}
					var resolutions []*messages.Resolution
					results := 0
					for _, ev := range evs {
						if r := ev.GetResolution(); r != nil {
							resolutions = append(resolutions, r)
						}
						if ev.GetToolResult() != nil {
							results++
						}
					}
					require.Len(t, resolutions, 1, "conversation %q: one resolution in the log", conv)
					require.Equal(t, 1, results, "conversation %q: one tool_result in the log", conv)
					row, err := h.store.ToolCall(ctx, ids[i])
					require.NoError(t, err)
					switch won {
					case 1:
						userWins++
						require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, row.GetStatus(), "conversation %q", conv)
						require.Equal(t, "user", resolutions[0].GetBy())
					case 0:
						require.True(t, expiry, "conversation %q: neither click won", conv)
						systemWins++
						require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, row.GetStatus(), "conversation %q", conv)
						require.Equal(t, "system", resolutions[0].GetBy())
					default:
						t.Fatalf("conversation %q: %d answers won", conv, won)
					}
					turns := h.model.Turns(conv)
					last := turns[len(turns)-1]
					seen := 0
					for _, ev := range last.Context {
						if ev.GetToolResult().GetToolCallId() == ids[i] {
							seen++
						}
					}
					require.Equal(t, 1, seen, "conversation %q: the model sees one result", conv)
				}
			}
			t.Logf("%d trials: the human won %d, the expiry %d", trials, userWins, systemWins)
		})
	}
}

// countingLoads is a Store that counts revival reads per conversation.
type countingLoads struct {
	journal.Store
	mu    sync.Mutex
	loads map[string]int
}

func (s *countingLoads) LoadSince(ctx context.Context, id string) (*messages.Summary, []*messages.Event, error) {
	s.mu.Lock()
	s.loads[id]++
	s.mu.Unlock()
	return s.Store.LoadSince(ctx, id)
}

// TestTortureOneActivation: many concurrent Wake and Send calls for one id
// that has no live actor activate it exactly once (one revival read), and
// every send lands once, in a gap-free log. 50 ids, 32 callers each,
// jostled starts.
func TestTortureOneActivation(t *testing.T) {
	const ids, callers = 50, 32
	rng := tortureSeed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	store := &countingLoads{Store: memjournal.New(memjournal.Options{}), loads: map[string]int{}}
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: scripted.New(scripted.Options{}), IdleTimeout: -1, NoResume: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, closeWithin(t, "Runtime.Close", rt.Close)) }()
	for n := range ids {
		id := fmt.Sprintf("one-%d", n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		var sends atomic.Int64
		for k := range callers {
			send, j := rng.IntN(2) == 0, rng.IntN(16)
			wg.Go(func() {
				<-start
				jostle(j)
				if send {
					sends.Add(1)
					msg := userMessage(fmt.Sprint("hello ", k))
					_, err := rt.SendMessage(ctx, id, msg, lazarus.SendOptions{RequestID: fmt.Sprint(id, "-", k)}, agent.Scope{UserID: "u"})
					assert.NoError(t, err)
				} else {
					assert.NoError(t, rt.Wake(ctx, id))
				}
			})
		}
		close(start)
		wg.Wait()
		store.mu.Lock()
		loads := store.loads[id]
		store.mu.Unlock()
		require.Equal(t, 1, loads, "conversation %q was activated %d times", id, loads)
		evs, err := rt.History(ctx, id, 0, 0)
		require.NoError(t, err)
		users := 0
		for i, ev := range evs {
			require.Equal(t, uint64(i+1), ev.GetSeq())
			if ev.GetUserMsg() != nil {
				users++
			}
		}
		require.EqualValues(t, sends.Load(), users, "conversation %q: every send once", id)
	}
	require.Equal(t, ids, rt.Active(), "one live actor per id")
}
