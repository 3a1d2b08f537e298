package lazarus_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// resumeStore counts the listings the runtime makes and can hold the
// listing of active conversations until its context ends.
type resumeStore struct {
	journal.Store
	listAll, listActive atomic.Int32
	block               bool
	entered             chan struct{}
	// listed, if set, runs once the listing has been read and before it is
	// returned.
	listed func()
}

func (s *resumeStore) ListConversations(ctx context.Context, cursor string, limit int) ([]*messages.Conversation, string, error) {
	s.listAll.Add(1)
	return s.Store.ListConversations(ctx, cursor, limit)
}

func (s *resumeStore) ListActiveConversations(ctx context.Context, cursor string, limit int) ([]string, string, error) {
	if s.listActive.Add(1) == 1 && s.block {
		close(s.entered)
		<-ctx.Done()
		return nil, "", ctx.Err()
	}
	ids, next, err := s.Store.ListActiveConversations(ctx, cursor, limit)
	if s.listed != nil {
		s.listed()
	}
	return ids, next, err
}

// seedResume writes idle conversations (a turn answered) and active ones
// (a user message the model owes a turn: what a kill mid-turn leaves).
func seedResume(t *testing.T, s journal.Store, idle, active int) (activeIDs []string) {
	t.Helper()
	ctx := t.Context()
	user := func(text string) *messages.Event {
		return &messages.Event{Time: journal.Timestamp(time.Unix(1, 0)), Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
			Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}}}}}
	}
	var reqs []*messages.AppendRequest
	for i := range idle {
		reqs = append(reqs, &messages.AppendRequest{
			ConversationId: fmt.Sprintf("idle-%04d", i),
			Events: []*messages.Event{user("hi"), {Time: journal.Timestamp(time.Unix(2, 0)), Body: &messages.Event_AssistantMsg{
				AssistantMsg: &messages.AssistantMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "hello"}}}}}}},
			FsmState: &messages.FSMState{State: messages.AgentState_AGENT_STATE_IDLE, LastSeq: 2},
			Status:   messages.ConversationStatus_CONVERSATION_STATUS_IDLE,
		})
	}
	for i := range active {
		id := fmt.Sprintf("active-%02d", i)
		activeIDs = append(activeIDs, id)
		reqs = append(reqs, &messages.AppendRequest{ConversationId: id, Events: []*messages.Event{user("what now?")},
			Status: messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE})
	}
	for _, res := range s.AppendBatch(ctx, reqs) {
		require.NoError(t, res.Err)
	}
	return activeIDs
}

// TestOpenResumesActiveConversationsFromTheIndex: Open wakes every ACTIVE
// conversation (its owed turn runs, with no new input) and no idle one, and
// finds them through the Store's index of ACTIVE conversations, never by
// listing every conversation.
func TestOpenResumesActiveConversationsFromTheIndex(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	store := &resumeStore{Store: memjournal.New(memjournal.Options{})}
	active := seedResume(t, store, 300, 7)
	model := scripted.New(scripted.Options{})
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: model})
	require.NoError(t, err)
	defer rt.Close()

	for _, id := range active {
		require.NoError(t, model.WaitCalls(ctx, id, 1), "the owed turn of %q runs", id)
		require.Eventually(t, func() bool {
			row, err := store.Conversation(ctx, id)
			return err == nil && row.GetStatus() == messages.ConversationStatus_CONVERSATION_STATUS_IDLE
		}, 20*time.Second, time.Millisecond, "the resumed turn of %q ends", id)
	}
	for i := range 300 {
		require.Zero(t, model.Calls(fmt.Sprintf("idle-%04d", i)), "an idle conversation is not resumed")
	}
	require.Zero(t, store.listAll.Load(), "resume does not list every conversation")
	require.Equal(t, int32(1), store.listActive.Load(), "one page of the index holds them all")
	ids, _, err := store.ListActiveConversations(ctx, "", 0)
	require.NoError(t, err)
	require.Empty(t, ids, "every resumed turn ended, so nothing is ACTIVE")
}

// TestCloseCancelsResume: Close ends a resume still listing (its context
// is cancelled) and returns.
func TestCloseCancelsResume(t *testing.T) {
	store := &resumeStore{Store: memjournal.New(memjournal.Options{}), block: true, entered: make(chan struct{})}
	seedResume(t, store, 3, 2)
	model := scripted.New(scripted.Options{})
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: model})
	require.NoError(t, err)
	select {
	case <-store.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("resume never listed the active conversations")
	}
	closed := make(chan error, 1)
	go func() { closed <- rt.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Close waits for a resume that is listing")
	}
	require.Zero(t, model.Calls("active-00"), "a resume that Close cancelled wakes nothing")
}

// TestResumeSkipsATurnThatEndedSinceTheListing: a conversation the resume
// scan listed as ACTIVE whose row says IDLE by the time its wake would go
// out (its turn ended meanwhile) is not woken: its model is never called
// and no actor of it is left alive; the other listed one is resumed.
func TestResumeSkipsATurnThatEndedSinceTheListing(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	store := &resumeStore{Store: memjournal.New(memjournal.Options{})}
	active := seedResume(t, store, 0, 2)
	store.listed = func() {
		assert.NoError(t, store.PutConversation(ctx, journal.ConversationUpdate{ID: active[0], Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE}))
	}
	model := scripted.New(scripted.Options{})
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: model})
	require.NoError(t, err)
	defer rt.Close()

	// The scan wakes in listing order: once the second is resumed, the
	// first was passed over.
	require.NoError(t, model.WaitCalls(ctx, active[1], 1), "the other listed conversation is resumed")
	require.Zero(t, model.Calls(active[0]), "the conversation whose turn ended is not woken")
	require.False(t, rt.IsActive(active[0]), "no actor of it is alive")
}

// answerLostStore fails the first write that holds an assistant_msg with
// journal.ErrUnknownOutcome, writing nothing of it: a commit whose reply
// was lost, as a dropped connection leaves it.
type answerLostStore struct {
	journal.Store
	failed atomic.Bool
}

func (s *answerLostStore) lose(req *messages.AppendRequest) bool {
	for _, ev := range req.GetEvents() {
		if ev.GetAssistantMsg() != nil {
			return s.failed.CompareAndSwap(false, true)
		}
	}
	return false
}

func (s *answerLostStore) Append(ctx context.Context, req *messages.AppendRequest) (journal.AppendResult, error) {
	if s.lose(req) {
		return journal.AppendResult{}, fmt.Errorf("test: connection lost during COMMIT: %w", journal.ErrUnknownOutcome)
	}
	return s.Store.Append(ctx, req)
}

func (s *answerLostStore) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	out := make([]journal.AppendResult, len(reqs))
	for i, req := range reqs {
		out[i].FirstSeq, out[i].LastSeq, out[i].Err = req.GetExpectedLast(), req.GetExpectedLast(), nil
		if s.lose(req) {
			out[i].Err = fmt.Errorf("test: connection lost during COMMIT: %w", journal.ErrUnknownOutcome)
			continue
		}
		res, err := s.Store.Append(ctx, req)
		out[i], out[i].Err = res, err
	}
	return out
}

// TestStalledTurnResumesWithoutACommand: a write that failed (its outcome
// unknown) stops the activation, and the turn it owed waits for no
// command: the periodic scan of ACTIVE conversations (ResumeInterval)
// wakes it, and the answer is written.
func TestStalledTurnResumesWithoutACommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store := &answerLostStore{Store: memjournal.New(memjournal.Options{})}
	model := scripted.New(scripted.Options{})
	model.Push("c", scripted.Text("lost"), scripted.Text("found"))
	rt, err := lazarus.Open(lazarus.Options{Model: model, Store: store, ResumeInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })

	_, err = rt.SendAndWait(ctx, "c", "hello", agent.Scope{UserID: "u"})
	require.ErrorIs(t, err, journal.ErrUnknownOutcome, "the answer's write failed")
	require.True(t, store.failed.Load())
	require.Eventually(t, func() bool {
		evs, err := rt.History(ctx, "c", 0, 0)
		return err == nil && len(evs) == 2 && evs[1].GetAssistantMsg() != nil
	}, 10*time.Second, 5*time.Millisecond, "the owed turn ran again with no command")
	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Equal(t, "found", evs[1].GetAssistantMsg().GetContent()[0].GetText())
	require.Equal(t, 2, model.Calls("c"))
}
