package actors_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// badDeadline is a Store whose Deadlines list, after the Store's own, a
// deadline of conversation "conv", call "bad", that has no time.
type badDeadline struct{ *memjournal.Store }

func (s badDeadline) Deadlines(ctx context.Context, dueBy time.Time, fn func(*messages.Deadline) error) error {
	if err := s.Store.Deadlines(ctx, dueBy, fn); err != nil {
		return err
	}
	return fn(&messages.Deadline{ConversationId: "conv", ToolCallId: "bad"})
}

// warnLog records each warning as its message and attributes.
type warnLog struct {
	mu   sync.Mutex
	recs []map[string]string
}

func (l *warnLog) Enabled(_ context.Context, level slog.Level) bool { return level >= slog.LevelWarn }
func (l *warnLog) Handle(_ context.Context, r slog.Record) error {
	rec := map[string]string{"msg": r.Message}
	r.Attrs(func(a slog.Attr) bool {
		rec[a.Key] = a.Value.String()
		return true
	})
	l.mu.Lock()
	l.recs = append(l.recs, rec)
	l.mu.Unlock()
	return nil
}
func (l *warnLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *warnLog) WithGroup(string) slog.Handler      { return l }

func (l *warnLog) matching(msg string) []map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]string
	for _, r := range l.recs {
		if strings.Contains(r["msg"], msg) {
			out = append(out, r)
		}
	}
	return out
}

// TestExpirySkipsABadStoredDeadlineNamingItsConversation: a stored
// deadline that does not validate (here: no time) is skipped, every other
// one is armed, and the warning names the conversation and the tool call
// whose deadline it is, so that an operator can find it.
func TestExpirySkipsABadStoredDeadlineNamingItsConversation(t *testing.T) {
	mem := memjournal.New(memjournal.Options{})
	pendingHumanCall(t, mem, "conv", "a", expiryT0.Add(time.Minute))
	h := newExpiryHarness(t, badDeadline{mem}, withRealJournal(t, mem))
	log := &warnLog{}
	h.opts.Logger = slog.New(log)
	h.start()

	h.waitArmed(t, expiryT0.Add(time.Minute))
	h.clock.Advance(time.Minute)
	require.Equal(t, delivery{"conv", "a"}, h.nextDelivery(t))
	recs := log.matching("skipping a bad stored deadline")
	require.Len(t, recs, 1)
	require.Equal(t, "conv", recs[0]["conversation"], "the warning names the conversation: %v", recs[0])
	require.Equal(t, "bad", recs[0]["tool_call"])
	require.Contains(t, recs[0]["err"], "without a time")
}
