package lazarus_test

import (
	"context"
	"slices"
	"strings"
	"sync"
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
