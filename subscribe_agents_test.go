package lazarus_test

import (
	"context"
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

// streamThenBlock is a model that streams its deltas, then blocks until
// release is closed or ctx ends.
type streamThenBlock struct {
	deltas  []string
	entered chan struct{}
	release chan struct{}
	calls   atomic.Int64
}

func (m *streamThenBlock) Generate(ctx context.Context, turn agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
	n := m.calls.Add(1)
	for _, d := range m.deltas {
		onDelta(d)
	}
	if n == 1 {
		close(m.entered)
	}
	select {
	case <-m.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	text := ""
	for _, d := range m.deltas {
		text += d
	}
	return agent.Text(text), nil
}

// TestAgentViewGetsItsDeltasMidAnswer: a view subscription that starts in
// the middle of a named agent's answer gets the deltas streamed so far,
// with their agent, then the answer; another agent's view gets none of it.
func TestAgentViewGetsItsDeltasMidAnswer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	crit := &streamThenBlock{deltas: []string{"ab", "cd"}, entered: make(chan struct{}), release: make(chan struct{})}
	rt, err := lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), IdleTimeout: -1,
		Agents: []lazarus.Agent{{Name: "critic", Model: crit}}})
	require.NoError(t, err)
	defer rt.Close()
	_, err = rt.SendMessage(ctx, "c", textMsg("review"), lazarus.SendOptions{Agent: "critic"}, agent.Scope{UserID: "u"})
	require.NoError(t, err)
	<-crit.entered
	cv, err := rt.SubscribeWith(ctx, "c", 0, lazarus.SubscribeOptions{Agent: lazarus.ViewOf("critic")})
	require.NoError(t, err)
	dv, err := rt.SubscribeWith(ctx, "c", 0, lazarus.SubscribeOptions{Agent: lazarus.ViewOf("")})
	require.NoError(t, err)
	u := <-cv
	require.Equal(t, uint64(1), u.Event.GetSeq())
	u = <-cv
	require.Equal(t, "ab", u.Delta)
	require.Equal(t, "critic", u.Agent)
	u = <-cv
	require.Equal(t, "cd", u.Delta)
	close(crit.release)
	u = <-cv
	require.Equal(t, uint64(2), u.Event.GetSeq())
	require.NotNil(t, u.TurnEnd)
	require.Equal(t, "abcd", u.TurnEnd.Text)
	// The default agent's view: nothing of the critic's.
	_, err = rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	u = <-dv
	require.Equal(t, uint64(3), u.Event.GetSeq(), "%+v", u)
}

// TestDeleteEndsAgentViewSubscriptions: Delete ends view subscriptions as
// plain ones (the events they had, then ErrDeleted), and a later
// SubscribeWith is refused with ErrDeleted.
func TestDeleteEndsAgentViewSubscriptions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rt, err := lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}),
		Agents: []lazarus.Agent{{Name: "critic"}}})
	require.NoError(t, err)
	defer rt.Close()
	_, err = rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	ch, err := rt.SubscribeWith(ctx, "c", 0, lazarus.SubscribeOptions{Agent: lazarus.ViewOf("critic")})
	require.NoError(t, err)
	plain, err := rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	// The plain subscription has the two events before the delete (its
	// history is read after Subscribe returns: a delete before that read
	// leaves it nothing to deliver but the end).
	for seq := uint64(1); seq <= 2; seq++ {
		u := <-plain
		require.Equal(t, seq, u.Event.GetSeq(), "%+v", u)
	}
	require.NoError(t, rt.Delete(ctx, "c"))
	var last lazarus.Update
	for u := range ch {
		last = u
	}
	require.ErrorIs(t, last.Err, journal.ErrDeleted)
	var rest []lazarus.Update
	for u := range plain {
		rest = append(rest, u)
	}
	require.Len(t, rest, 1, "the end, and nothing else")
	require.ErrorIs(t, rest[0].Err, journal.ErrDeleted)
	_, err = rt.SubscribeWith(ctx, "c", 0, lazarus.SubscribeOptions{Agent: lazarus.ViewOf("critic")})
	require.ErrorIs(t, err, journal.ErrDeleted)
}

// TestNamedAgentModelCallsAreMetered: Metrics.ModelCall reports the calls
// of a named agent's own Model, and their errors.
func TestNamedAgentModelCallsAreMetered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var calls, errs atomic.Int64
	crit := scripted.New(scripted.Options{})
	crit.PushError("c", agent.ErrRefused)
	rt, err := lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}),
		Agents: []lazarus.Agent{{Name: "critic", Model: crit}},
		Metrics: lazarus.Metrics{ModelCall: func(_ time.Duration, err error) {
			calls.Add(1)
			if err != nil {
				errs.Add(1)
			}
		}}})
	require.NoError(t, err)
	defer rt.Close()
	end, err := rt.SendMessageAndWait(ctx, "c", textMsg("x"), lazarus.SendOptions{Agent: "critic"}, agent.Scope{UserID: "u"})
	require.ErrorIs(t, err, agent.ErrRefused)
	require.Equal(t, lazarus.TurnFailed, end.Outcome)
	require.EqualValues(t, 1, calls.Load())
	require.EqualValues(t, 1, errs.Load())
}

// pausingStore pauses after the next Conversation read once armed, until
// release is closed.
type pausingStore struct {
	journal.Store
	armed   atomic.Bool
	paused  chan struct{}
	release chan struct{}
}

func (s *pausingStore) Conversation(ctx context.Context, id string) (*messages.Conversation, error) {
	c, err := s.Store.Conversation(ctx, id)
	if s.armed.CompareAndSwap(true, false) {
		close(s.paused)
		<-s.release
	}
	return c, err
}

// TestSubscribeRacingDeleteEnds: a Delete that lands after Subscribe found
// the conversation but before it registered ends that subscription too
// (it stayed open, silent, until its ctx ended).
func TestSubscribeRacingDeleteEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st := &pausingStore{Store: memjournal.New(memjournal.Options{}), paused: make(chan struct{}), release: make(chan struct{})}
	rt, err := lazarus.Open(lazarus.Options{Store: st, Model: scripted.New(scripted.Options{})})
	require.NoError(t, err)
	defer rt.Close()
	_, err = rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	st.armed.Store(true)
	type res struct {
		ch  <-chan lazarus.Update
		err error
	}
	got := make(chan res, 1)
	go func() {
		ch, err := rt.Subscribe(ctx, "c", 0)
		got <- res{ch, err}
	}()
	<-st.paused // Subscribe found the conversation; it is not registered yet
	require.NoError(t, rt.Delete(ctx, "c"))
	close(st.release)
	r := <-got
	if r.err != nil {
		require.ErrorIs(t, r.err, journal.ErrDeleted)
		return
	}
	var last lazarus.Update
	for u := range r.ch {
		last = u
	}
	require.ErrorIs(t, last.Err, journal.ErrDeleted)
}

// TestCancelledModelCallIsMeteredAsAnError: a model call the runtime
// cancels (a kill) is reported to Metrics.ModelCall with its context's
// error, even when the Model ignores its ctx and answers.
func TestCancelledModelCallIsMeteredAsAnError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	entered, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	model := agent.ModelFunc(func(ctx context.Context, turn agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
		if first.CompareAndSwap(false, true) {
			close(entered)
			<-release // deaf to ctx
		}
		return agent.Text("done"), nil
	})
	errs := make(chan error, 4)
	rt, err := lazarus.Open(lazarus.Options{Model: model, IdleTimeout: -1,
		Metrics: lazarus.Metrics{ModelCall: func(_ time.Duration, err error) { errs <- err }}})
	require.NoError(t, err)
	defer rt.Close()
	_, err = rt.Send(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	<-entered
	require.True(t, rt.Kill("c"))
	close(release)
	select {
	case err := <-errs:
		require.ErrorIs(t, err, context.Canceled)
	case <-ctx.Done():
		t.Fatal("the cancelled call was not reported")
	}
}

// A subscription asked to start after a seq past the log's last event is
// refused with ErrInvalid naming the last seq, as the HTTP event stream
// refuses such a cursor: it waited, dropping every event until the log
// passed it. A seq in the log, the last one included, and 0 are taken.
func TestSubscribeRefusesASeqPastTheLog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	model := scripted.New(scripted.Options{})
	model.Push("c", scripted.Text("hello"))
	rt := openTurnRuntime(t, model)
	end, err := rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"}) // 1, 2
	require.NoError(t, err)
	require.Equal(t, uint64(2), end.Seq)

	_, err = rt.Subscribe(ctx, "c", 3)
	require.ErrorIs(t, err, journal.ErrInvalid)
	require.ErrorContains(t, err, "the log ends at seq 2")
	_, err = rt.SubscribeWith(ctx, "c", 99, lazarus.SubscribeOptions{Agent: lazarus.ViewOf("")})
	require.ErrorIs(t, err, journal.ErrInvalid)
	_, err = rt.Subscribe(ctx, "new", 1)
	require.ErrorIs(t, err, journal.ErrInvalid, "a conversation without events has no seq 1")

	for _, after := range []uint64{0, 1, 2} {
		sctx, scancel := context.WithCancel(ctx)
		sub, err := rt.Subscribe(sctx, "c", after)
		require.NoError(t, err)
		if after < 2 {
			u := <-sub
			require.NotNil(t, u.Event)
			require.Equal(t, after+1, u.Event.GetSeq())
		}
		scancel()
		for range sub {
		}
	}
	sub, err := rt.Subscribe(ctx, "new", 0)
	require.NoError(t, err, "0 is the whole log, also of a conversation without events")
	_ = sub
}
