package lazarus_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

const toolApprove = "approve"

var user = agent.Scope{UserID: "u"}

// gatedStore is an in-memory Store whose batched writes (the journal
// actor's) can be held: a held write has been handed over, and its caller
// waits for it.
type gatedStore struct {
	journal.Store
	mu      sync.Mutex
	match   func(*messages.AppendRequest) bool
	gate    chan struct{}
	entered chan struct{}
}

func newGatedStore() *gatedStore {
	return &gatedStore{Store: memjournal.New(memjournal.Options{}), entered: make(chan struct{}, 16)}
}

// hold makes the writes of batches holding a request that match accepts
// wait until release is called.
func (s *gatedStore) hold(match func(*messages.AppendRequest) bool) (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := make(chan struct{})
	s.match, s.gate = match, g
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.match, s.gate = nil, nil
			s.mu.Unlock()
			close(g)
		})
	}
}

func (s *gatedStore) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	s.mu.Lock()
	match, gate := s.match, s.gate
	s.mu.Unlock()
	if match != nil {
		for _, r := range reqs {
			if match(r) {
				s.entered <- struct{}{}
				<-gate
				break
			}
		}
	}
	return s.Store.AppendBatch(ctx, reqs)
}

// withRequest matches the write of a user message of request id.
func withRequest(id string) func(*messages.AppendRequest) bool {
	return func(r *messages.AppendRequest) bool {
		for _, ev := range r.GetEvents() {
			if ev.GetUserMsg() != nil && ev.GetRequestId() == id {
				return true
			}
		}
		return false
	}
}

// resolving matches the write of an answer to a call.
func resolving(callID string) func(*messages.AppendRequest) bool {
	return func(r *messages.AppendRequest) bool {
		for _, res := range r.GetResolutions() {
			if res.GetToolCallId() == callID {
				return true
			}
		}
		return false
	}
}

func textMsg(text string) *messages.UserMessage {
	return &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}}}
}

func openContract(t *testing.T, store journal.Store, model *scripted.Model, callTimeout time.Duration) *lazarus.Runtime {
	t.Helper()
	rt, err := lazarus.Open(lazarus.Options{
		Store: store, Model: model, CallTimeout: callTimeout, IdleTimeout: -1,
		Tools: []agent.Tool{{Name: toolApprove, Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Hour}},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	return rt
}

// suspend sends to conv, whose model asks for approval, and returns the
// pending call's id once the suspension is durable.
func suspend(ctx context.Context, t *testing.T, rt *lazarus.Runtime, model *scripted.Model, conv string) string {
	t.Helper()
	model.Push(conv, scripted.Reply("", scripted.Call(toolApprove, `{}`)))
	sub, err := rt.Subscribe(ctx, conv, 0)
	require.NoError(t, err)
	_, err = rt.Send(ctx, conv, "may I?", user)
	require.NoError(t, err)
	for u := range sub {
		if p := u.Event.GetSuspension().GetPending(); len(p) == 1 {
			return p[0].GetToolCallId()
		}
	}
	t.Fatalf("conversation %q: no suspension: %v", conv, ctx.Err())
	return ""
}

// answered sends to conv and waits for the model's answer to be durable.
func answered(ctx context.Context, t *testing.T, rt *lazarus.Runtime, model *scripted.Model, conv string) {
	t.Helper()
	model.Push(conv, scripted.Text("ok"))
	sub, err := rt.Subscribe(ctx, conv, 0)
	require.NoError(t, err)
	_, err = rt.Send(ctx, conv, "hello", user)
	require.NoError(t, err)
	for u := range sub {
		if u.Event.GetAssistantMsg() != nil {
			return
		}
	}
	t.Fatalf("conversation %q: no answer: %v", conv, ctx.Err())
}

func userMsgsWith(ctx context.Context, t *testing.T, rt *lazarus.Runtime, conv, requestID string) int {
	t.Helper()
	evs, err := rt.History(ctx, conv, 0, 0)
	require.NoError(t, err)
	n := 0
	for _, ev := range evs {
		if ev.GetUserMsg() != nil && ev.GetRequestId() == requestID {
			n++
		}
	}
	return n
}

// landed waits until the message of requestID and the model's answer to
// it are in the log: the activation has taken the write's reply, so a
// retry meets a settled conversation (a retry overlapping the write itself
// is a concern of the idempotency tests, not of this contract).
func landed(ctx context.Context, t *testing.T, rt *lazarus.Runtime, conv, requestID string) {
	t.Helper()
	sub, err := rt.Subscribe(ctx, conv, 0)
	require.NoError(t, err)
	seen := false
	for u := range sub {
		switch {
		case u.Event.GetUserMsg() != nil && u.Event.GetRequestId() == requestID:
			seen = true
		case seen && u.Event.GetAssistantMsg() != nil:
			return
		}
	}
	t.Fatalf("conversation %q: request %q not answered: %v", conv, requestID, ctx.Err())
}

func await(t *testing.T, done <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: the call is still waiting", what)
		return nil
	}
}

func awaitEntered(t *testing.T, s *gatedStore) {
	t.Helper()
	select {
	case <-s.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the write never reached the Store")
	}
}

// TestEntryCallsWithEndedContextDoNothing: an entry call whose context has
// already ended (cancelled, or past its deadline) returns an error wrapping
// ctx.Err() and does nothing: no message appended, no answer recorded, no
// actor woken, no subscription. Send, Resolve, Reject and Wake used to read
// only the deadline: with a cancelled context they wrote anyway and
// returned nil.
func TestEntryCallsWithEndedContextDoNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	model := scripted.New(scripted.Options{})
	rt := openContract(t, memjournal.New(memjournal.Options{}), model, 0)
	callID := suspend(ctx, t, rt, model, "c")
	before, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.True(t, rt.Kill("c"))

	cancelled, cancelNow := context.WithCancel(context.Background())
	cancelNow()
	expired, cancelExpired := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancelExpired()
	for _, ended := range []context.Context{cancelled, expired} {
		want := ended.Err()
		_, err := rt.Send(ended, "c", "more", user)
		require.ErrorIs(t, err, want, "Send")
		_, err = rt.Send(ended, "new", "hello", user)
		require.ErrorIs(t, err, want, "Send to a new conversation")
		_, err = rt.SendMessage(ended, "c", textMsg("more"), lazarus.SendOptions{RequestID: "r"}, user)
		require.ErrorIs(t, err, want, "SendMessage")
		require.ErrorIs(t, rt.Resolve(ended, callID, `{"ok":true}`, user), want, "Resolve")
		require.ErrorIs(t, rt.Reject(ended, callID, "no", user), want, "Reject")
		require.ErrorIs(t, rt.Wake(ended, "c"), want, "Wake")
		_, err = rt.History(ended, "c", 0, 0)
		require.ErrorIs(t, err, want, "History")
		_, err = rt.Subscribe(ended, "c", 0)
		require.ErrorIs(t, err, want, "Subscribe")
	}

	require.False(t, rt.IsActive("c"), "no Wake or Send revived the conversation")
	require.Zero(t, rt.Active())
	after, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Len(t, after, len(before), "nothing appended")
	row, err := rt.Store().ToolCall(ctx, callID)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, row.GetStatus(), "no answer recorded")
	_, err = rt.Store().Conversation(ctx, "new")
	require.ErrorIs(t, err, journal.ErrNotFound, "no conversation created")
}

// TestCallEndingAfterHandOverHasUnknownOutcome: a call whose context ends
// while its write is in the Store returns at once with an error wrapping
// lazarus.ErrUnknownOutcome and ctx.Err() (it used to wait for the write,
// or out its CallTimeout, and then say "future: timeout", which wraps
// nothing). The documented cure works: the write did land, a SendMessage
// retried with the same RequestID appends nothing and returns its seq, and
// a Resolve retried is ErrStale with the row showing the first answer.
func TestCallEndingAfterHandOverHasUnknownOutcome(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	model := scripted.New(scripted.Options{})
	store := newGatedStore()
	rt := openContract(t, store, model, time.Hour)
	answered(ctx, t, rt, model, "s")
	callID := suspend(ctx, t, rt, model, "h")

	model.Push("s", scripted.Text("again"))
	release := store.hold(withRequest("req-1"))
	defer release()
	callCtx, cancelCall := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := rt.SendMessage(callCtx, "s", textMsg("once"), lazarus.SendOptions{RequestID: "req-1"}, user)
		done <- err
	}()
	awaitEntered(t, store)
	cancelCall()
	err := await(t, done, "SendMessage")
	require.ErrorIs(t, err, lazarus.ErrUnknownOutcome)
	require.ErrorIs(t, err, context.Canceled)
	release()
	landed(ctx, t, rt, "s", "req-1")
	seq, err := rt.SendMessage(ctx, "s", textMsg("once"), lazarus.SendOptions{RequestID: "req-1"}, user)
	require.NoError(t, err, "the retry")
	evs, err := rt.History(ctx, "s", seq+1, 1)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.Equal(t, "req-1", evs[0].GetRequestId(), "the seq of the first attempt's message")
	require.Equal(t, 1, userMsgsWith(ctx, t, rt, "s", "req-1"), "appended once")

	model.Push("h", scripted.Text("thanks"))
	sub, err := rt.Subscribe(ctx, "h", 0)
	require.NoError(t, err)
	release = store.hold(resolving(callID))
	defer release()
	callCtx, cancelCall = context.WithCancel(ctx)
	go func() { done <- rt.Resolve(callCtx, callID, `{"approved":true}`, user) }()
	awaitEntered(t, store)
	cancelCall()
	err = await(t, done, "Resolve")
	require.ErrorIs(t, err, lazarus.ErrUnknownOutcome)
	require.ErrorIs(t, err, context.Canceled)
	release()
	err = rt.Resolve(ctx, callID, `{"approved":false}`, user)
	require.ErrorIs(t, err, journal.ErrStale, "the retry: already answered")
	require.ErrorIs(t, err, journal.ErrInvalid, "an answer to a call that is not pending is bad input (DESIGN §11)")
	err = rt.Resolve(ctx, "call_never_made", `{}`, user)
	require.ErrorIs(t, err, journal.ErrStale, "an unknown call")
	require.ErrorIs(t, err, journal.ErrInvalid)
	row, err := rt.Store().ToolCall(ctx, callID)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, row.GetStatus())
	require.JSONEq(t, `{"approved":true}`, row.GetResult().GetContent(), "the first answer landed")
	// The live activation, which does not read the row again, hears of
	// the answer (from the retry that found it) and runs its turn.
	awaitFinalAnswer(t, sub)
}

// TestCallTimeoutIsUnknownOutcome: a call that outlives Options.CallTimeout
// after its write was handed over ends like one whose context ended: an
// error wrapping ErrUnknownOutcome and context.DeadlineExceeded (it was
// "supervisor: ... did not answer: future: timeout").
func TestCallTimeoutIsUnknownOutcome(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	model := scripted.New(scripted.Options{})
	store := newGatedStore()
	// Long enough for a revival on a busy machine; the held write below
	// outlives it whatever its length.
	rt := openContract(t, store, model, 2*time.Second)
	answered(ctx, t, rt, model, "s")

	model.Push("s", scripted.Text("again"))
	release := store.hold(withRequest("req-1"))
	defer release()
	_, err := rt.SendMessage(context.Background(), "s", textMsg("once"), lazarus.SendOptions{RequestID: "req-1"}, user)
	require.ErrorIs(t, err, lazarus.ErrUnknownOutcome)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	release()
	landed(ctx, t, rt, "s", "req-1")
	_, err = rt.SendMessage(ctx, "s", textMsg("once"), lazarus.SendOptions{RequestID: "req-1"}, user)
	require.NoError(t, err)
	require.Equal(t, 1, userMsgsWith(ctx, t, rt, "s", "req-1"))
}

// TestCloseEndsCallsInFlight: a call in flight when Close is called returns
// once Close has stopped the actors, with an error wrapping ErrClosed (and
// ErrUnknownOutcome: its write was handed over), never a raw "supervisor:
// stopped" or a wait for CallTimeout; every call after Close is ErrClosed.
func TestCloseEndsCallsInFlight(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	model := scripted.New(scripted.Options{})
	store := newGatedStore()
	rt := openContract(t, store, model, time.Hour)
	answered(ctx, t, rt, model, "s")
	callID := suspend(ctx, t, rt, model, "h")

	release := store.hold(withRequest("req-1"))
	defer release()
	done := make(chan error, 1)
	go func() {
		_, err := rt.SendMessage(context.Background(), "s", textMsg("once"), lazarus.SendOptions{RequestID: "req-1"}, user)
		done <- err
	}()
	awaitEntered(t, store)
	closed := make(chan error, 1)
	go func() { closed <- rt.Close() }()
	// The journal actor finishes the held write before it stops, so Close
	// returns only after release; the call returns before that.
	err := await(t, done, "SendMessage in flight")
	require.ErrorIs(t, err, lazarus.ErrClosed)
	require.ErrorIs(t, err, lazarus.ErrUnknownOutcome)
	release()
	require.NoError(t, await(t, closed, "Close"))

	_, err = rt.Send(ctx, "s", "late", user)
	require.ErrorIs(t, err, lazarus.ErrClosed)
	require.ErrorIs(t, rt.Resolve(ctx, callID, `{}`, user), lazarus.ErrClosed)
	require.ErrorIs(t, rt.Reject(ctx, callID, "no", user), lazarus.ErrClosed)
	require.ErrorIs(t, rt.Wake(ctx, "s"), lazarus.ErrClosed)
	_, err = rt.History(ctx, "s", 0, 0)
	require.ErrorIs(t, err, lazarus.ErrClosed)
	_, err = rt.Subscribe(ctx, "s", 0)
	require.ErrorIs(t, err, lazarus.ErrClosed)
}

// TestConcurrentCloseWaitsForTheFirst: a Close called while another is
// still stopping the runtime returns once that one has finished (the
// actors stopped, the pending write answered, the Store closed if the
// Runtime opened it), with nil; it returned nil at once, so a caller could
// reopen the directory while the first still held it.
func TestConcurrentCloseWaitsForTheFirst(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	model := scripted.New(scripted.Options{})
	store := newGatedStore()
	rt := openContract(t, store, model, time.Hour)
	answered(ctx, t, rt, model, "s")

	release := store.hold(withRequest("req-1"))
	defer release()
	sent := make(chan error, 1)
	go func() {
		_, err := rt.SendMessage(context.Background(), "s", textMsg("once"), lazarus.SendOptions{RequestID: "req-1"}, user)
		sent <- err
	}()
	awaitEntered(t, store)
	first := make(chan error, 1)
	go func() { first <- rt.Close() }()
	// The first Close has begun: calls are refused. It cannot finish
	// before release (the journal actor answers the held write first).
	require.Eventually(t, func() bool {
		_, err := rt.History(ctx, "s", 0, 1)
		return errors.Is(err, lazarus.ErrClosed)
	}, 20*time.Second, time.Millisecond)
	second := make(chan error, 1)
	go func() { second <- rt.Close() }()
	select {
	case err := <-second:
		t.Fatalf("a second Close returned (%v) while the first was still stopping the runtime", err)
	case <-time.After(200 * time.Millisecond):
		// Still waiting, as it should: no bound on how long it may wait.
	}
	release()
	require.NoError(t, await(t, first, "first Close"))
	require.NoError(t, await(t, second, "second Close"))
	require.ErrorIs(t, await(t, sent, "SendMessage in flight"), lazarus.ErrClosed)
	require.NoError(t, rt.Close(), "a Close after Close")
}

// TestCloseEndsWorkInFlight: Close with a model call, a server tool, a
// subscription and a SendAndWait in flight ends each as documented (the
// model's and the tool's contexts are cancelled, the subscription's
// channel is closed, SendAndWait returns ErrClosed) and returns; the
// methods without an error answer as for a stopped runtime, and the calls
// not in TestEveryCallWithEndedContextOrAfterClose's list return ErrClosed.
func TestCloseEndsWorkInFlight(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inModel, modelEnded := make(chan struct{}, 1), make(chan error, 1)
	inTool, toolEnded := make(chan struct{}, 1), make(chan error, 1)
	model := agent.ModelFunc(func(ctx context.Context, turn agent.Turn, _ func(string)) (*messages.AssistantMessage, error) {
		if turn.Context[len(turn.Context)-1].GetUserMsg().GetContent()[0].GetText() == "run the tool" {
			return agent.Reply("", agent.Call("block", `{}`)), nil
		}
		inModel <- struct{}{}
		<-ctx.Done()
		modelEnded <- ctx.Err()
		return nil, ctx.Err()
	})
	rt, err := lazarus.Open(lazarus.Options{Model: model, Dir: t.TempDir(), Tools: []agent.Tool{{
		Name: "block", Executor: messages.Executor_EXECUTOR_SERVER,
		Run: func(ctx context.Context, _ agent.Invocation) (string, error) {
			inTool <- struct{}{}
			<-ctx.Done()
			toolEnded <- ctx.Err()
			return "", ctx.Err()
		},
	}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	sub, err := rt.Subscribe(ctx, "m", 0)
	require.NoError(t, err)
	waited := make(chan error, 1)
	go func() {
		_, err := rt.SendAndWait(ctx, "m", "hello", user)
		waited <- err
	}()
	awaitSignal(t, inModel, "the model call")
	_, err = rt.Send(ctx, "t", "run the tool", user)
	require.NoError(t, err)
	awaitSignal(t, inTool, "the tool run")

	closed := make(chan error, 1)
	go func() { closed <- rt.Close() }()
	require.NoError(t, await(t, closed, "Close"))
	require.ErrorIs(t, await(t, modelEnded, "the model call"), context.Canceled)
	require.ErrorIs(t, await(t, toolEnded, "the tool run"), context.Canceled)
	require.ErrorIs(t, await(t, waited, "SendAndWait"), lazarus.ErrClosed)
	for range sub {
	}
	require.NoError(t, rt.Close(), "Close twice")

	require.False(t, rt.Kill("m"))
	require.False(t, rt.IsActive("m"))
	require.Zero(t, rt.Active())
	_, err = rt.SendMessageAndWait(ctx, "m", textMsg("x"), lazarus.SendOptions{}, user)
	require.ErrorIs(t, err, lazarus.ErrClosed)
	_, err = rt.RewindWithReport(ctx, "m", 1, lazarus.RewindOptions{}, user)
	require.ErrorIs(t, err, lazarus.ErrClosed)
	require.ErrorIs(t, rt.ForkWith(ctx, "m", 1, "n", lazarus.ForkOptions{}), lazarus.ErrClosed)
	require.ErrorIs(t, rt.Reject(ctx, "call", "no", user), lazarus.ErrClosed)
}

func awaitSignal(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s never started", what)
	}
}

// writeCutByContext is an in-memory Store whose write named cut, once its
// ctx ends, fails as a PostgreSQL store's does when the context ends after
// COMMIT was sent: journal.ErrUnknownOutcome, wrapping the context's error.
type writeCutByContext struct {
	*memjournal.Store
	cut     atomic.Value // string
	entered chan struct{}
}

func (s *writeCutByContext) cutOff(ctx context.Context, name string) error {
	if cut, _ := s.cut.Load().(string); cut != name {
		return nil
	}
	s.entered <- struct{}{}
	<-ctx.Done()
	return fmt.Errorf("store: %s: commit: %w: %w", name, journal.ErrUnknownOutcome, ctx.Err())
}

func (s *writeCutByContext) Fork(ctx context.Context, req *messages.ForkRequest) error {
	if err := s.cutOff(ctx, "Fork"); err != nil {
		return err
	}
	return s.Store.Fork(ctx, req)
}

func (s *writeCutByContext) PutMetadata(ctx context.Context, id string, kv map[string]string) error {
	if err := s.cutOff(ctx, "PutMetadata"); err != nil {
		return err
	}
	return s.Store.PutMetadata(ctx, id, kv)
}

func (s *writeCutByContext) PutSchedule(ctx context.Context, sc *messages.Schedule) error {
	if err := s.cutOff(ctx, "PutSchedule"); err != nil {
		return err
	}
	return s.Store.PutSchedule(ctx, sc)
}

func (s *writeCutByContext) DeleteSchedule(ctx context.Context, conv, id string) error {
	if err := s.cutOff(ctx, "DeleteSchedule"); err != nil {
		return err
	}
	return s.Store.DeleteSchedule(ctx, conv, id)
}

func (s *writeCutByContext) DeleteConversation(ctx context.Context, id string) error {
	if err := s.cutOff(ctx, "DeleteConversation"); err != nil {
		return err
	}
	return s.Store.DeleteConversation(ctx, id)
}

// TestStoreWriteCutByContextHasUnknownOutcome: a write the Runtime makes in
// the Store itself (Fork, MergeMetadata, Schedule, CancelSchedule,
// Delete), whose context ends once the Store has sent it, fails with
// ErrUnknownOutcome as well as the context's error, as the Store said:
// Fork's was mapped to the context's error alone, which the contract
// reserves for a call that wrote nothing, and the others passed the
// Store's error on without the Runtime's sentinel.
func TestStoreWriteCutByContextHasUnknownOutcome(t *testing.T) {
	for _, c := range []struct {
		cut  string
		call func(ctx context.Context, rt *lazarus.Runtime, sc string) error
	}{
		{"Fork", func(ctx context.Context, rt *lazarus.Runtime, _ string) error { return rt.Fork(ctx, "s", 1, "s-copy") }},
		{"PutMetadata", func(ctx context.Context, rt *lazarus.Runtime, _ string) error {
			return rt.MergeMetadata(ctx, "s", map[string]string{"k": "v"})
		}},
		{"PutSchedule", func(ctx context.Context, rt *lazarus.Runtime, _ string) error {
			_, err := rt.Schedule(ctx, "s", lazarus.ScheduleSpec{After: time.Hour, Text: "later"}, user)
			return err
		}},
		{"DeleteSchedule", func(ctx context.Context, rt *lazarus.Runtime, sc string) error {
			return rt.CancelSchedule(ctx, "s", sc)
		}},
		{"DeleteConversation", func(ctx context.Context, rt *lazarus.Runtime, _ string) error { return rt.Delete(ctx, "s") }},
	} {
		t.Run(c.cut, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			model := scripted.New(scripted.Options{})
			store := &writeCutByContext{Store: memjournal.New(memjournal.Options{}), entered: make(chan struct{}, 1)}
			rt, err := lazarus.Open(lazarus.Options{Store: store, Model: model, IdleTimeout: -1})
			require.NoError(t, err)
			defer rt.Close()
			answered(ctx, t, rt, model, "s")
			sc, err := rt.Schedule(ctx, "s", lazarus.ScheduleSpec{After: time.Hour, Text: "later"}, user)
			require.NoError(t, err)
			store.cut.Store(c.cut)

			callCtx, cancelCall := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- c.call(callCtx, rt, sc.GetId()) }()
			select {
			case <-store.entered:
			case <-ctx.Done():
				t.Fatal("the write never reached the Store")
			}
			cancelCall()
			err = await(t, done, c.cut)
			require.ErrorIs(t, err, lazarus.ErrUnknownOutcome)
			require.ErrorIs(t, err, context.Canceled)
			require.ErrorIs(t, err, journal.ErrUnknownOutcome, "the Store's error is kept")
		})
	}
}

// readAfterClose is an in-memory Store whose read named held, once armed,
// waits until released and then fails as a Store the Runtime opened does
// once Close has closed it: a call that passed the Runtime's entry check
// before Close and reached the Store after it.
type readAfterClose struct {
	*memjournal.Store
	held    atomic.Value // string
	entered chan struct{}
	release chan struct{}
}

func (s *readAfterClose) hold(name string) error {
	if held, _ := s.held.Load().(string); held != name {
		return nil
	}
	s.entered <- struct{}{}
	<-s.release
	return fmt.Errorf("store: %s: %w", name, journal.ErrClosed)
}

func (s *readAfterClose) Conversation(ctx context.Context, id string) (*messages.Conversation, error) {
	if err := s.hold("Conversation"); err != nil {
		return nil, err
	}
	return s.Store.Conversation(ctx, id)
}

func (s *readAfterClose) ListPendingToolCalls(ctx context.Context, cursor string, limit int) ([]*messages.ToolCallRecord, string, error) {
	if err := s.hold("ListPendingToolCalls"); err != nil {
		return nil, "", err
	}
	return s.Store.ListPendingToolCalls(ctx, cursor, limit)
}

func (s *readAfterClose) ConversationSchedules(ctx context.Context, conv string) ([]*messages.Schedule, error) {
	if err := s.hold("ConversationSchedules"); err != nil {
		return nil, err
	}
	return s.Store.ConversationSchedules(ctx, conv)
}

func (s *readAfterClose) FindConversations(ctx context.Context, key, value, cursor string, limit int) ([]string, string, error) {
	if err := s.hold("FindConversations"); err != nil {
		return nil, "", err
	}
	return s.Store.FindConversations(ctx, key, value, cursor, limit)
}

// TestCloseEndsAStoreReadInFlightWithErrClosed: a call that reads the Store
// itself (Metadata, Settings, Schedules, PendingCalls, Find) and meets the
// Store closed under it by Close returns an error wrapping ErrClosed, as
// every call in flight at Close does; it passed the Store's
// journal.ErrClosed on alone.
func TestCloseEndsAStoreReadInFlightWithErrClosed(t *testing.T) {
	for _, c := range []struct {
		name, held string
		call       func(ctx context.Context, rt *lazarus.Runtime) error
	}{
		{"Metadata", "Conversation", func(ctx context.Context, rt *lazarus.Runtime) error {
			_, err := rt.Metadata(ctx, "s")
			return err
		}},
		{"Settings", "Conversation", func(ctx context.Context, rt *lazarus.Runtime) error {
			_, err := rt.Settings(ctx, "s")
			return err
		}},
		{"Schedules", "ConversationSchedules", func(ctx context.Context, rt *lazarus.Runtime) error {
			_, err := rt.Schedules(ctx, "s")
			return err
		}},
		{"PendingCalls", "ListPendingToolCalls", func(ctx context.Context, rt *lazarus.Runtime) error {
			_, _, err := rt.PendingCalls(ctx, "", 0)
			return err
		}},
		{"Find", "FindConversations", func(ctx context.Context, rt *lazarus.Runtime) error {
			_, _, err := rt.Find(ctx, "k", "v", "", 0)
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			model := scripted.New(scripted.Options{})
			store := &readAfterClose{Store: memjournal.New(memjournal.Options{}), entered: make(chan struct{}, 1), release: make(chan struct{})}
			rt, err := lazarus.Open(lazarus.Options{Store: store, Model: model, IdleTimeout: -1})
			require.NoError(t, err)
			defer rt.Close()
			answered(ctx, t, rt, model, "s")
			store.held.Store(c.held)

			done := make(chan error, 1)
			go func() { done <- c.call(ctx, rt) }()
			select {
			case <-store.entered:
			case <-ctx.Done():
				t.Fatal("the call never reached the Store")
			}
			require.NoError(t, rt.Close())
			close(store.release)
			err = await(t, done, c.name)
			require.ErrorIs(t, err, lazarus.ErrClosed)
			require.ErrorIs(t, err, journal.ErrClosed, "the Store's error is kept")
		})
	}
}
