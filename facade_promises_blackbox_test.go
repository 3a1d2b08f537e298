package lazarus_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// DESIGN §11: an empty id, one over journal.MaxIDBytes, and one that is not
// UTF-8 are bad input: every entry taking a conversation or tool call id
// refuses them with an error wrapping journal.ErrInvalid (not merely some
// sentinel), and writes nothing.
func TestDocsBadIDsWrapErrInvalid(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	model := agent.ModelFunc(func(ctx context.Context, turn agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	})
	rt, err := lazarus.Open(lazarus.Options{Model: model})
	require.NoError(t, err)
	defer rt.Close()
	_, err = rt.SendAndWait(ctx, "good", "hi", user)
	require.NoError(t, err)
	msg := &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "x"}}}}
	type call struct {
		name string
		f    func(id string) error
	}
	calls := []call{
		{"Send", func(id string) error { _, err := rt.Send(ctx, id, "x", user); return err }},
		{"SendMessage", func(id string) error { _, err := rt.SendMessage(ctx, id, msg, lazarus.SendOptions{}, user); return err }},
		{"SendAndWait", func(id string) error { _, err := rt.SendAndWait(ctx, id, "x", user); return err }},
		{"SendMessageAndWait", func(id string) error {
			_, err := rt.SendMessageAndWait(ctx, id, msg, lazarus.SendOptions{}, user)
			return err
		}},
		{"SendMessage-RequestID", func(id string) error {
			_, err := rt.SendMessage(ctx, "good", msg, lazarus.SendOptions{RequestID: id + "\xff"}, user)
			return err
		}},
		{"Resolve", func(id string) error { return rt.Resolve(ctx, id, "{}", user) }},
		{"Reject", func(id string) error { return rt.Reject(ctx, id, "no", user) }},
		{"Reschedule", func(id string) error { return rt.Reschedule(ctx, id, time.Now().Add(time.Hour)) }},
		{"History", func(id string) error { _, err := rt.History(ctx, id, 0, 0); return err }},
		{"HistoryWithin", func(id string) error { _, err := rt.HistoryWithin(ctx, id, 0, 0, 0); return err }},
		{"HistoryView", func(id string) error { _, err := rt.HistoryView(ctx, id, lazarus.HistoryOptions{}); return err }},
		{"Chapters", func(id string) error { _, err := rt.Chapters(ctx, id, 0); return err }},
		{"ChaptersWithin", func(id string) error { _, err := rt.ChaptersWithin(ctx, id, 0, 0); return err }},
		{"Subscribe", func(id string) error { _, err := rt.Subscribe(ctx, id, 0); return err }},
		{"SubscribeWith", func(id string) error {
			_, err := rt.SubscribeWith(ctx, id, 0, lazarus.SubscribeOptions{})
			return err
		}},
		{"Wake", func(id string) error { return rt.Wake(ctx, id) }},
		{"End", func(id string) error { return rt.End(ctx, id) }},
		{"Delete", func(id string) error { return rt.Delete(ctx, id) }},
		{"Fork-src", func(id string) error { return rt.Fork(ctx, id, 1, "fork-of-bad") }},
		{"Fork-new", func(id string) error { return rt.Fork(ctx, "good", 1, id) }},
		{"Rewind", func(id string) error { return rt.Rewind(ctx, id, 1, lazarus.RewindOptions{}, user) }},
		{"RewindWithReport", func(id string) error {
			_, err := rt.RewindWithReport(ctx, id, 1, lazarus.RewindOptions{}, user)
			return err
		}},
		{"Edit", func(id string) error { _, err := rt.Edit(ctx, id, 1, "new", user); return err }},
		{"Configure", func(id string) error { return rt.Configure(ctx, id, agent.Settings{SystemPrompt: "p"}) }},
		{"Settings", func(id string) error { _, err := rt.Settings(ctx, id); return err }},
		{"Metadata", func(id string) error { _, err := rt.Metadata(ctx, id); return err }},
		{"MergeMetadata", func(id string) error { return rt.MergeMetadata(ctx, id, map[string]string{"k": "v"}) }},
		{"MergeMetadata-key", func(id string) error { return rt.MergeMetadata(ctx, "good", map[string]string{id: "v"}) }},
		{"Find-key", func(id string) error { _, _, err := rt.Find(ctx, id, "v", "", 0); return err }},
		{"Schedule", func(id string) error {
			_, err := rt.Schedule(ctx, id, lazarus.ScheduleSpec{After: time.Hour, Text: "x"}, user)
			return err
		}},
		{"Schedules", func(id string) error { _, err := rt.Schedules(ctx, id); return err }},
		{"CancelSchedule", func(id string) error { return rt.CancelSchedule(ctx, id, "s") }},
	}
	ids := map[string]string{
		"empty":    "",
		"too long": strings.Repeat("x", journal.MaxIDBytes+1),
		"not UTF8": "bad\xff",
	}
	before, err := rt.History(ctx, "good", 0, 0)
	require.NoError(t, err)
	for what, id := range ids {
		for _, c := range calls {
			if c.name == "SendMessage-RequestID" && id == "" {
				continue // an empty RequestID is the default: a random key
			}
			require.ErrorIs(t, c.f(id), journal.ErrInvalid, "%s with an id %s", c.name, what)
		}
	}
	after, err := rt.History(ctx, "good", 0, 0)
	require.NoError(t, err)
	require.Len(t, after, len(before), "nothing written")
	md, err := rt.Metadata(ctx, "good")
	require.NoError(t, err)
	require.Empty(t, md)
}

// endedCtxSpy is a Store that notes every read or write it is asked for
// with a context that had already ended.
type endedCtxSpy struct {
	journal.Store
	mu    sync.Mutex
	calls []string
}

func (s *endedCtxSpy) note(ctx context.Context, what string) {
	if ctx.Err() != nil {
		s.mu.Lock()
		s.calls = append(s.calls, what)
		s.mu.Unlock()
	}
}

func (s *endedCtxSpy) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

func (s *endedCtxSpy) reset() {
	s.mu.Lock()
	s.calls = nil
	s.mu.Unlock()
}

func (s *endedCtxSpy) LastSeq(ctx context.Context, id string) (uint64, error) {
	s.note(ctx, "LastSeq")
	return s.Store.LastSeq(ctx, id)
}

func (s *endedCtxSpy) Events(ctx context.Context, id string, q journal.EventQuery) ([]*messages.Event, error) {
	s.note(ctx, "Events")
	return s.Store.Events(ctx, id, q)
}

func (s *endedCtxSpy) LoadSince(ctx context.Context, id string) (*messages.Summary, []*messages.Event, error) {
	s.note(ctx, "LoadSince")
	return s.Store.LoadSince(ctx, id)
}

func (s *endedCtxSpy) LatestSummary(ctx context.Context, id string) (*messages.Summary, error) {
	s.note(ctx, "LatestSummary")
	return s.Store.LatestSummary(ctx, id)
}

func (s *endedCtxSpy) Conversation(ctx context.Context, id string) (*messages.Conversation, error) {
	s.note(ctx, "Conversation")
	return s.Store.Conversation(ctx, id)
}

func (s *endedCtxSpy) ToolCall(ctx context.Context, id string) (*messages.ToolCallRecord, error) {
	s.note(ctx, "ToolCall")
	return s.Store.ToolCall(ctx, id)
}

func (s *endedCtxSpy) Metadata(ctx context.Context, id string) (map[string]string, error) {
	s.note(ctx, "Metadata")
	return s.Store.Metadata(ctx, id)
}

func (s *endedCtxSpy) AppendBatch(ctx context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	s.note(ctx, "AppendBatch")
	return s.Store.AppendBatch(ctx, reqs)
}

// The entry contract (ErrClosed's doc): a call whose ctx already ended
// returns an error wrapping ctx.Err() "and nothing read or written,
// whatever the Store does with a ctx that ended". SendAndWait read the
// Store's LastSeq before it looked at ctx.
func TestDocsEndedContextReadsNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := &endedCtxSpy{Store: memjournal.New(memjournal.Options{})}
	model := scripted.New(scripted.Options{})
	rt := openContract(t, store, model, 0)
	answered(ctx, t, rt, model, "a")
	callID := suspend(ctx, t, rt, model, "c")
	store.reset()

	ended, cancelNow := context.WithCancel(context.Background())
	cancelNow()
	msg := agent.UserMessage(agent.TextPart("more"))
	calls := []struct {
		name string
		f    func(ctx context.Context) error
	}{
		{"Send", func(ctx context.Context) error { _, err := rt.Send(ctx, "a", "more", user); return err }},
		{"SendAndWait", func(ctx context.Context) error { _, err := rt.SendAndWait(ctx, "a", "more", user); return err }},
		{"SendMessageAndWait", func(ctx context.Context) error {
			_, err := rt.SendMessageAndWait(ctx, "a", msg, lazarus.SendOptions{RequestID: "r"}, user)
			return err
		}},
		{"Resolve", func(ctx context.Context) error { return rt.Resolve(ctx, callID, "{}", user) }},
		{"Reject", func(ctx context.Context) error { return rt.Reject(ctx, callID, "no", user) }},
		{"Wake", func(ctx context.Context) error { return rt.Wake(ctx, "a") }},
		{"History", func(ctx context.Context) error { _, err := rt.History(ctx, "a", 0, 0); return err }},
		{"HistoryWithin", func(ctx context.Context) error { _, err := rt.HistoryWithin(ctx, "a", 0, 0, 0); return err }},
		{"HistoryView", func(ctx context.Context) error {
			_, err := rt.HistoryView(ctx, "a", lazarus.HistoryOptions{})
			return err
		}},
		{"Subscribe", func(ctx context.Context) error { _, err := rt.Subscribe(ctx, "a", 0); return err }},
		{"Chapters", func(ctx context.Context) error { _, err := rt.Chapters(ctx, "a", 0); return err }},
		{"Rewind", func(ctx context.Context) error { return rt.Rewind(ctx, "a", 1, lazarus.RewindOptions{}, user) }},
		{"Edit", func(ctx context.Context) error { _, err := rt.Edit(ctx, "a", 1, "new", user); return err }},
		{"Fork", func(ctx context.Context) error { return rt.Fork(ctx, "a", 2, "a-fork") }},
		{"End", func(ctx context.Context) error { return rt.End(ctx, "a") }},
		{"Delete", func(ctx context.Context) error { return rt.Delete(ctx, "a") }},
		{"Configure", func(ctx context.Context) error { return rt.Configure(ctx, "a", agent.Settings{SystemPrompt: "p"}) }},
		{"Settings", func(ctx context.Context) error { _, err := rt.Settings(ctx, "a"); return err }},
		{"Metadata", func(ctx context.Context) error { _, err := rt.Metadata(ctx, "a"); return err }},
		{"Schedule", func(ctx context.Context) error {
			_, err := rt.Schedule(ctx, "a", lazarus.ScheduleSpec{After: time.Hour, Text: "y"}, user)
			return err
		}},
		{"Reschedule", func(ctx context.Context) error { return rt.Reschedule(ctx, callID, time.Now().Add(time.Hour)) }},
	}
	for _, c := range calls {
		require.ErrorIs(t, c.f(ended), context.Canceled, c.name)
		require.Empty(t, store.seen(), "%s: the Store was asked with a ctx that had ended", c.name)
	}
}

// The documented answers of the facade to unknown, deleted and repeated
// things, checked one by one against a Runtime on the in-memory Store.
func TestDocsFacadePromises(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	model := scripted.New(scripted.Options{})
	rt := openContract(t, memjournal.New(memjournal.Options{}), model, 0)

	t.Run("SendAndWait returns the answer's end: its seq and text", func(t *testing.T) {
		model.Push("answer", scripted.Text("one"))
		end, err := rt.SendAndWait(ctx, "answer", "hi", user)
		require.NoError(t, err)
		require.Equal(t, lazarus.TurnAnswered, end.Outcome)
		require.Equal(t, "one", end.Text)
		require.NoError(t, end.Err)
		evs, err := rt.History(ctx, "answer", 0, 0)
		require.NoError(t, err)
		require.Len(t, evs, 2)
		require.Equal(t, evs[1].GetSeq(), end.Seq, "the seq of the assistant message")
		require.NotNil(t, evs[1].GetAssistantMsg())
	})

	t.Run("SendAndWait of a suspended turn lists its pending calls", func(t *testing.T) {
		model.Push("susp", scripted.Reply("", scripted.Call(toolApprove, `{}`)))
		end, err := rt.SendAndWait(ctx, "susp", "may I?", user)
		require.NoError(t, err)
		require.Equal(t, lazarus.TurnSuspended, end.Outcome)
		require.Len(t, end.Pending, 1)
		evs, err := rt.History(ctx, "susp", 0, 0)
		require.NoError(t, err)
		require.NotNil(t, evs[len(evs)-1].GetSuspension())
		require.Equal(t, evs[len(evs)-1].GetSeq(), end.Seq)
		pending, _, err := rt.PendingCalls(ctx, "", 0)
		require.NoError(t, err)
		require.Condition(t, func() bool {
			for _, p := range pending {
				if p.GetId() == end.Pending[0].GetToolCallId() {
					return true
				}
			}
			return false
		}, "PendingCalls lists it")
	})

	t.Run("a RequestID repeated appends nothing and returns the first seq", func(t *testing.T) {
		model.Push("idem", scripted.Text("a"), scripted.Text("b"))
		opts := lazarus.SendOptions{RequestID: "req-1"}
		end, err := rt.SendMessageAndWait(ctx, "idem", agent.UserMessage(agent.TextPart("hi")), opts, user)
		require.NoError(t, err)
		require.Equal(t, "a", end.Text)
		seq, err := rt.SendMessage(ctx, "idem", agent.UserMessage(agent.TextPart("hi")), opts, user)
		require.NoError(t, err)
		require.Equal(t, uint64(1), seq)
		again, err := rt.SendMessageAndWait(ctx, "idem", agent.UserMessage(agent.TextPart("hi")), opts, user)
		require.NoError(t, err)
		require.Equal(t, end, again, "the end of the first turn after the message")
		require.True(t, rt.Kill("idem"))
		seq, err = rt.SendMessage(ctx, "idem", agent.UserMessage(agent.TextPart("hi")), opts, user)
		require.NoError(t, err)
		require.Equal(t, uint64(1), seq, "after a kill and revival too")
		require.Equal(t, 1, userMsgsWith(ctx, t, rt, "idem", "req-1"))
		evs, err := rt.History(ctx, "idem", 0, 0)
		require.NoError(t, err)
		require.Len(t, evs, 2, "no turn ran again")
		model.Push("idem-other", scripted.Text("c"))
		other, err := rt.SendMessageAndWait(ctx, "idem-other", agent.UserMessage(agent.TextPart("hi")), opts, user)
		require.NoError(t, err)
		require.Equal(t, "c", other.Text, "a key is the conversation's: another one's message is new")
		require.Equal(t, 1, userMsgsWith(ctx, t, rt, "idem-other", "req-1"))
	})

	t.Run("History after a kill and revival is the same log", func(t *testing.T) {
		model.Push("kill", scripted.Text("one"), scripted.Text("two"))
		_, err := rt.SendAndWait(ctx, "kill", "hi", user)
		require.NoError(t, err)
		before, err := rt.History(ctx, "kill", 0, 0)
		require.NoError(t, err)
		require.True(t, rt.Kill("kill"))
		require.False(t, rt.Kill("kill"), "no longer live")
		after, err := rt.History(ctx, "kill", 0, 0)
		require.NoError(t, err)
		require.Equal(t, seqsAndTypes(before), seqsAndTypes(after))
		require.NoError(t, rt.Wake(ctx, "kill"))
		require.True(t, rt.IsActive("kill"))
		after, err = rt.History(ctx, "kill", 0, 0)
		require.NoError(t, err)
		require.Equal(t, seqsAndTypes(before), seqsAndTypes(after), "the revival wrote nothing")
		end, err := rt.SendAndWait(ctx, "kill", "again", user)
		require.NoError(t, err)
		require.Equal(t, "two", end.Text)
		require.Equal(t, uint64(4), end.Seq)
	})

	t.Run("Resolve and Reject of an unknown or answered call", func(t *testing.T) {
		id := suspend(ctx, t, rt, model, "answer-twice")
		for _, f := range []func(id string) error{
			func(id string) error { return rt.Resolve(ctx, id, "{}", user) },
			func(id string) error { return rt.Reject(ctx, id, "no", user) },
		} {
			err := f("no-such-call")
			require.ErrorIs(t, err, journal.ErrStale)
			require.ErrorIs(t, err, journal.ErrInvalid)
		}
		model.Push("answer-twice", scripted.Text("thanks"))
		require.NoError(t, rt.Resolve(ctx, id, `{"ok":true}`, user))
		err := rt.Resolve(ctx, id, `{"ok":false}`, user)
		require.ErrorIs(t, err, journal.ErrStale)
		require.ErrorIs(t, err, journal.ErrInvalid)
		err = rt.Reject(ctx, id, "no", user)
		require.ErrorIs(t, err, journal.ErrStale)
		require.ErrorIs(t, err, journal.ErrInvalid)
		row, err := rt.Store().ToolCall(ctx, id)
		require.NoError(t, err)
		require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, row.GetStatus())
		require.JSONEq(t, `{"ok":true}`, row.GetResult().GetContent(), "the first answer stands")
	})

	t.Run("Resolve refuses a result that is not JSON or too large", func(t *testing.T) {
		id := suspend(ctx, t, rt, model, "bad-result")
		require.ErrorIs(t, rt.Resolve(ctx, id, "not json", user), journal.ErrInvalid)
		require.ErrorIs(t, rt.Resolve(ctx, id, `"`+strings.Repeat("x", agent.MaxResultBytes)+`"`, user), journal.ErrInvalid)
		row, err := rt.Store().ToolCall(ctx, id)
		require.NoError(t, err)
		require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, row.GetStatus(), "nothing written")
	})

	t.Run("unknown conversations", func(t *testing.T) {
		evs, err := rt.History(ctx, "nobody", 0, 0)
		require.NoError(t, err, "nothing stored: no events, no error")
		require.Empty(t, evs)
		_, err = rt.Metadata(ctx, "nobody")
		require.ErrorIs(t, err, journal.ErrNotFound)
		require.ErrorIs(t, rt.MergeMetadata(ctx, "nobody", map[string]string{"k": "v"}), journal.ErrNotFound)
		_, err = rt.Settings(ctx, "nobody")
		require.ErrorIs(t, err, journal.ErrNotFound)
		require.ErrorIs(t, rt.Rewind(ctx, "nobody", 1, lazarus.RewindOptions{}, user), journal.ErrNotFound)
		require.ErrorIs(t, rt.End(ctx, "nobody"), journal.ErrNotFound, "as Rewind")
		require.ErrorIs(t, rt.Fork(ctx, "nobody", 1, "nobody-fork"), journal.ErrNotFound)
		require.ErrorIs(t, rt.Delete(ctx, "nobody"), journal.ErrNotFound)
		require.False(t, rt.Kill("nobody"))
		view, err := rt.HistoryView(ctx, "nobody", lazarus.HistoryOptions{})
		require.NoError(t, err)
		require.Empty(t, view)
		ch, err := rt.Chapters(ctx, "nobody", 0)
		require.NoError(t, err)
		require.Empty(t, ch.Events)
		scs, err := rt.Schedules(ctx, "nobody")
		require.NoError(t, err)
		require.Empty(t, scs)
		require.ErrorIs(t, rt.CancelSchedule(ctx, "nobody", "s"), lazarus.ErrNoSchedule)
		_, err = rt.Schedule(ctx, "nobody", lazarus.ScheduleSpec{After: time.Hour, Text: "x"}, user)
		require.ErrorIs(t, err, journal.ErrNotFound)
		_, err = rt.Edit(ctx, "nobody", 1, "x", user)
		require.ErrorIs(t, err, journal.ErrNotFound, "as Rewind")
		require.NoError(t, rt.Wake(ctx, "nobody"), "activated empty")
		evs, err = rt.History(ctx, "nobody", 0, 0)
		require.NoError(t, err)
		require.Empty(t, evs, "the wake wrote nothing")
	})

	t.Run("deleted conversations", func(t *testing.T) {
		model.Push("gone", scripted.Text("one"))
		_, err := rt.SendAndWait(ctx, "gone", "hi", user)
		require.NoError(t, err)
		require.NoError(t, rt.MergeMetadata(ctx, "gone", map[string]string{"k": "v"}))
		require.NoError(t, rt.Delete(ctx, "gone"))
		require.ErrorIs(t, rt.Delete(ctx, "gone"), journal.ErrDeleted, "again")
		_, err = rt.History(ctx, "gone", 0, 0)
		require.ErrorIs(t, err, journal.ErrDeleted)
		_, err = rt.Subscribe(ctx, "gone", 0)
		require.ErrorIs(t, err, journal.ErrDeleted)
		_, err = rt.Send(ctx, "gone", "hi", user)
		require.ErrorIs(t, err, journal.ErrDeleted)
		_, err = rt.SendAndWait(ctx, "gone", "hi", user)
		require.ErrorIs(t, err, journal.ErrDeleted)
		_, err = rt.Metadata(ctx, "gone")
		require.ErrorIs(t, err, journal.ErrDeleted)
		require.ErrorIs(t, rt.MergeMetadata(ctx, "gone", map[string]string{"k": "w"}), journal.ErrDeleted)
		_, err = rt.Settings(ctx, "gone")
		require.ErrorIs(t, err, journal.ErrDeleted)
		require.ErrorIs(t, rt.Configure(ctx, "gone", agent.Settings{SystemPrompt: "p"}), journal.ErrDeleted)
		require.ErrorIs(t, rt.Rewind(ctx, "gone", 1, lazarus.RewindOptions{}, user), journal.ErrDeleted)
		require.ErrorIs(t, rt.End(ctx, "gone"), journal.ErrDeleted)
		require.ErrorIs(t, rt.Fork(ctx, "gone", 1, "gone-fork"), journal.ErrDeleted)
		require.ErrorIs(t, rt.Fork(ctx, "answer", 1, "gone"), journal.ErrDeleted, "a deleted newID")
		require.ErrorIs(t, rt.Wake(ctx, "gone"), journal.ErrDeleted)
		_, err = rt.HistoryView(ctx, "gone", lazarus.HistoryOptions{})
		require.ErrorIs(t, err, journal.ErrDeleted)
		_, err = rt.Chapters(ctx, "gone", 0)
		require.ErrorIs(t, err, journal.ErrDeleted)
		_, err = rt.Schedules(ctx, "gone")
		require.ErrorIs(t, err, journal.ErrDeleted)
		require.ErrorIs(t, rt.CancelSchedule(ctx, "gone", "s"), journal.ErrDeleted)
		_, err = rt.Edit(ctx, "gone", 1, "x", user)
		require.ErrorIs(t, err, journal.ErrDeleted)
		require.ErrorIs(t, rt.Wake(ctx, "gone"), journal.ErrDeleted, "every time")
		_, err = rt.Schedule(ctx, "gone", lazarus.ScheduleSpec{After: time.Hour, Text: "x"}, user)
		require.ErrorIs(t, err, journal.ErrDeleted)
		ids, _, err := rt.Find(ctx, "k", "v", "", 0)
		require.NoError(t, err)
		require.NotContains(t, ids, "gone")
	})

	t.Run("ended conversations", func(t *testing.T) {
		model.Push("ended", scripted.Text("one"))
		model.Push("ended-fork", scripted.Text("forked"))
		_, err := rt.SendAndWait(ctx, "ended", "hi", user)
		require.NoError(t, err)
		require.NoError(t, rt.Configure(ctx, "ended", agent.Settings{SystemPrompt: "before"}))
		require.NoError(t, rt.End(ctx, "ended"))
		require.NoError(t, rt.End(ctx, "ended"), "ending an ended conversation succeeds")
		before, err := rt.History(ctx, "ended", 0, 0)
		require.NoError(t, err)
		_, err = rt.SendAndWait(ctx, "ended", "more", user)
		require.ErrorIs(t, err, journal.ErrEnded)
		require.ErrorIs(t, rt.Configure(ctx, "ended", agent.Settings{SystemPrompt: "after"}), journal.ErrEnded)
		s, err := rt.Settings(ctx, "ended")
		require.NoError(t, err)
		require.Equal(t, "before", s.SystemPrompt, "its settings left as they were")
		require.NoError(t, rt.MergeMetadata(ctx, "ended", map[string]string{"k": "ended"}), "Metadata works as before")
		_, err = rt.Subscribe(ctx, "ended", 0)
		require.NoError(t, err, "Subscribe works as before")
		require.NoError(t, rt.Wake(ctx, "ended"))
		after, err := rt.History(ctx, "ended", 0, 0)
		require.NoError(t, err)
		require.Equal(t, seqsAndTypes(before), seqsAndTypes(after), "nothing written")
		require.NoError(t, rt.Fork(ctx, "ended", 2, "ended-fork"), "fork it to go on")
		end, err := rt.SendAndWait(ctx, "ended-fork", "go on", user)
		require.NoError(t, err)
		require.Equal(t, "forked", end.Text)
	})

	t.Run("Rewind to 0 rewinds to the start and cancels the open call", func(t *testing.T) {
		id := suspend(ctx, t, rt, model, "rewound")
		before, err := rt.History(ctx, "rewound", 0, 0)
		require.NoError(t, err)
		require.NoError(t, rt.Rewind(ctx, "rewound", 0, lazarus.RewindOptions{Reason: "start over"}, user))
		after, err := rt.History(ctx, "rewound", 0, 0)
		require.NoError(t, err)
		require.Len(t, after, len(before)+1, "one rewind event; the log keeps the rest")
		require.NotNil(t, after[len(after)-1].GetRewind())
		view, err := rt.HistoryView(ctx, "rewound", lazarus.HistoryOptions{Effective: true})
		require.NoError(t, err)
		require.Empty(t, view, "the model sees nothing of it")
		row, err := rt.Store().ToolCall(ctx, id)
		require.NoError(t, err)
		require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED, row.GetStatus())
		require.Equal(t, agent.CodeCanceled, row.GetResult().GetError().GetCode())
		err = rt.Resolve(ctx, id, "{}", user)
		require.ErrorIs(t, err, journal.ErrStale)
		require.ErrorIs(t, err, journal.ErrInvalid)
		model.Push("rewound", scripted.Text("fresh"))
		end, err := rt.SendAndWait(ctx, "rewound", "again", user)
		require.NoError(t, err)
		require.Equal(t, "fresh", end.Text)
		turns := model.Turns("rewound")
		last := turns[len(turns)-1].Context
		require.Len(t, last, 1, "the model's context starts after the rewind")
		require.Equal(t, "again", last[0].GetUserMsg().GetContent()[0].GetText())
	})

	t.Run("Find and PendingCalls bounds", func(t *testing.T) {
		_, _, err := rt.Find(ctx, "k", "v", "", -1)
		require.ErrorIs(t, err, journal.ErrInvalid)
		ids, next, err := rt.Find(ctx, "k", "", "", 0)
		require.NoError(t, err, "an empty value finds nothing")
		require.Empty(t, ids)
		require.Empty(t, next)
		_, _, err = rt.PendingCalls(ctx, "", -1)
		require.ErrorIs(t, err, journal.ErrInvalid)
		_, _, err = rt.PendingCalls(ctx, "no page returned this", 0)
		require.ErrorIs(t, err, journal.ErrInvalid)
	})

	t.Run("Fork into an id that exists", func(t *testing.T) {
		require.ErrorIs(t, rt.Fork(ctx, "answer", 1, "kill"), journal.ErrExists)
		require.ErrorIs(t, rt.Fork(ctx, "answer", 99, "answer-fork"), journal.ErrInvalid, "past the log")
		require.ErrorIs(t, rt.Fork(ctx, "answer", 0, "answer-fork"), journal.ErrInvalid, "seq 0")
	})

	t.Run("after Close", func(t *testing.T) {
		require.NoError(t, rt.Close())
		require.NoError(t, rt.Close(), "idempotent")
		require.False(t, rt.Kill("kill"))
		_, err := rt.SendAndWait(ctx, "kill", "hi", user)
		require.ErrorIs(t, err, lazarus.ErrClosed)
		require.ErrorIs(t, rt.Delete(ctx, "kill"), lazarus.ErrClosed)
		require.ErrorIs(t, rt.Resolve(ctx, "x", "{}", user), lazarus.ErrClosed)
		require.ErrorIs(t, rt.Reject(ctx, "x", "no", user), lazarus.ErrClosed)
		require.ErrorIs(t, rt.Wake(ctx, "kill"), lazarus.ErrClosed)
		_, err = rt.History(ctx, "kill", 0, 0)
		require.ErrorIs(t, err, lazarus.ErrClosed)
		_, err = rt.Subscribe(ctx, "kill", 0)
		require.ErrorIs(t, err, lazarus.ErrClosed)
		_, err = rt.Send(ctx, "kill", "hi", user)
		require.ErrorIs(t, err, lazarus.ErrClosed)
	})
}

func seqsAndTypes(evs []*messages.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = fmt.Sprintf("%d:%T", ev.GetSeq(), ev.GetBody())
	}
	return out
}

// nilSummarizer is a Summarizer whose nil pointer is no Summarizer.
type nilSummarizer struct{}

func (*nilSummarizer) Summarize(context.Context, string, *messages.Summary, []*messages.Event) (*messages.Summary, error) {
	return nil, nil
}

// Options.Model "Required", and the interface fields of Options in
// general: a nil pointer or func in the interface passed the == nil checks
// and failed later, a nil agent.ModelFunc as a panic in every turn (each
// turn failed), a nil *memjournal.Store as a panic in Open itself. Open
// refuses them with ErrInvalid.
func TestDocsOpenRefusesNilInterfaceOptions(t *testing.T) {
	model := scripted.New(scripted.Options{})
	var store *memjournal.Store
	var clock *actorstest.ManualClock
	var sum *nilSummarizer
	for name, opts := range map[string]lazarus.Options{
		"nil ModelFunc":            {Model: agent.ModelFunc(nil)},
		"nil Model pointer":        {Model: (*scripted.Model)(nil)},
		"nil Store pointer":        {Model: model, Store: store},
		"nil Clock pointer":        {Model: model, Clock: clock},
		"nil Summarizer":           {Model: model, Summarizer: sum},
		"nil LLM summarizer model": {Model: model, Summarizer: snapshot.LLM{Model: agent.ModelFunc(nil)}},
		"nil agent ModelFunc":      {Model: model, Agents: []lazarus.Agent{{Name: "helper", Model: agent.ModelFunc(nil)}}},
	} {
		t.Run(name, func(t *testing.T) {
			var rt *lazarus.Runtime
			var err error
			require.NotPanics(t, func() { rt, err = lazarus.Open(opts) })
			require.ErrorIs(t, err, journal.ErrInvalid)
			require.Nil(t, rt)
		})
	}
	// A nil agent Model is still the documented default: Options.Model.
	rt, err := lazarus.Open(lazarus.Options{Model: model, Agents: []lazarus.Agent{{Name: "helper"}}})
	require.NoError(t, err)
	require.NoError(t, rt.Close())
}

// Options.Store: "A Store passed here is not closed by Close"; the one Open
// opens (Dir, "created if missing", or the in-memory default) is, and a
// Runtime opened again on the same Dir finds the conversation.
func TestDocsCloseClosesOnlyTheStoreItOpened(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	model := scripted.New(scripted.Options{})

	mine := memjournal.New(memjournal.Options{})
	rt, err := lazarus.Open(lazarus.Options{Model: model, Store: mine})
	require.NoError(t, err)
	_, err = rt.Send(ctx, "c", "hi", user)
	require.NoError(t, err)
	require.NoError(t, rt.Close())
	last, err := mine.LastSeq(ctx, "c")
	require.NoError(t, err, "the Store passed in is still open")
	require.Positive(t, last)
	again, err := lazarus.Open(lazarus.Options{Model: model, Store: mine, NoResume: true})
	require.NoError(t, err)
	evs, err := again.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.NotEmpty(t, evs)
	require.NoError(t, again.Close())
	require.NoError(t, mine.Close())

	rt, err = lazarus.Open(lazarus.Options{Model: model})
	require.NoError(t, err)
	owned := rt.Store()
	require.NoError(t, rt.Close())
	_, err = owned.LastSeq(ctx, "c")
	require.ErrorIs(t, err, journal.ErrClosed, "the in-memory Store Open made is closed")

	dir := filepath.Join(t.TempDir(), "not", "yet")
	rt, err = lazarus.Open(lazarus.Options{Model: model, Dir: dir})
	require.NoError(t, err, "Dir is created if missing")
	model.Push("d", scripted.Text("kept"))
	_, err = rt.SendAndWait(ctx, "d", "hi", user)
	require.NoError(t, err)
	owned = rt.Store()
	require.NoError(t, rt.Close())
	_, err = owned.LastSeq(ctx, "d")
	require.ErrorIs(t, err, journal.ErrClosed, "the Pebble Store Open opened is closed")
	rt, err = lazarus.Open(lazarus.Options{Model: model, Dir: dir})
	require.NoError(t, err, "the directory is free again")
	evs, err = rt.History(ctx, "d", 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, 2)
	require.NoError(t, rt.Close())
}

// The entry contract for the variants no other test lists: with a ctx
// that ended, an error wrapping context.Canceled; after Close, one
// wrapping ErrClosed; nothing written either way.
func TestDocsVariantsWithEndedContextOrAfterClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	model := scripted.New(scripted.Options{})
	rt := openContract(t, memjournal.New(memjournal.Options{}), model, 0)
	answered(ctx, t, rt, model, "a")
	before, err := rt.History(ctx, "a", 0, 0)
	require.NoError(t, err)
	ended, cancelNow := context.WithCancel(context.Background())
	cancelNow()
	msg := agent.UserMessage(agent.TextPart("more"))
	calls := []struct {
		name string
		f    func(ctx context.Context) error
	}{
		{"SendMessage", func(ctx context.Context) error {
			_, err := rt.SendMessage(ctx, "a", msg, lazarus.SendOptions{RequestID: "r"}, user)
			return err
		}},
		{"SendMessageAndWait", func(ctx context.Context) error {
			_, err := rt.SendMessageAndWait(ctx, "a", msg, lazarus.SendOptions{RequestID: "r"}, user)
			return err
		}},
		{"HistoryWithin", func(ctx context.Context) error { _, err := rt.HistoryWithin(ctx, "a", 0, 0, 10); return err }},
		{"ChaptersWithin", func(ctx context.Context) error { _, err := rt.ChaptersWithin(ctx, "a", 0, 10); return err }},
		{"ForkWith", func(ctx context.Context) error {
			return rt.ForkWith(ctx, "a", 2, "a-fork", lazarus.ForkOptions{Metadata: map[string]string{"k": "v"}})
		}},
		{"RewindWithReport", func(ctx context.Context) error {
			_, err := rt.RewindWithReport(ctx, "a", 1, lazarus.RewindOptions{}, user)
			return err
		}},
		{"Subscribe", func(ctx context.Context) error { _, err := rt.Subscribe(ctx, "a", 0); return err }},
		{"Wake", func(ctx context.Context) error { return rt.Wake(ctx, "a") }},
	}
	for _, c := range calls {
		require.ErrorIs(t, c.f(ended), context.Canceled, c.name)
	}
	require.NoError(t, rt.Close())
	for _, c := range calls {
		require.ErrorIs(t, c.f(ctx), lazarus.ErrClosed, c.name)
	}
	after, err := rt.Store().Events(ctx, "a", journal.EventQuery{})
	require.NoError(t, err)
	require.Len(t, after, len(before), "nothing written")
	_, err = rt.Store().Conversation(ctx, "a-fork")
	require.ErrorIs(t, err, journal.ErrNotFound, "no fork")
}
