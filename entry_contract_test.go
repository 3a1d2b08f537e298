package lazarus_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
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
)

// Every call taking a ctx, given one that already ended, does nothing and
// returns an error wrapping ctx.Err(); after Close, ErrClosed.
func TestEveryCallWithEndedContextOrAfterClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	model := scripted.New(scripted.Options{})
	rt := openContract(t, memjournal.New(memjournal.Options{}), model, 0)
	answered(ctx, t, rt, model, "a")
	callID := suspend(ctx, t, rt, model, "c")
	require.NoError(t, rt.MergeMetadata(ctx, "a", map[string]string{"k": "v"}))
	sc, err := rt.Schedule(ctx, "a", lazarus.ScheduleSpec{After: time.Hour, Text: "x"}, user)
	require.NoError(t, err)
	before, err := rt.History(ctx, "a", 0, 0)
	require.NoError(t, err)

	ended, cancelNow := context.WithCancel(context.Background())
	cancelNow()
	type call struct {
		name string
		f    func(ctx context.Context) error
	}
	calls := []call{
		{"Rewind", func(ctx context.Context) error { return rt.Rewind(ctx, "a", 1, lazarus.RewindOptions{}, user) }},
		{"Edit", func(ctx context.Context) error { _, err := rt.Edit(ctx, "a", 1, "new", user); return err }},
		{"Fork", func(ctx context.Context) error { return rt.Fork(ctx, "a", 2, "a-fork") }},
		{"Find", func(ctx context.Context) error { _, _, err := rt.Find(ctx, "k", "v", "", 0); return err }},
		{"End", func(ctx context.Context) error { return rt.End(ctx, "a") }},
		{"Configure", func(ctx context.Context) error {
			return rt.Configure(ctx, "a", agent.Settings{SystemPrompt: "p"})
		}},
		{"Configure-new", func(ctx context.Context) error {
			return rt.Configure(ctx, "fresh", agent.Settings{SystemPrompt: "p"})
		}},
		{"Settings", func(ctx context.Context) error { _, err := rt.Settings(ctx, "a"); return err }},
		{"Delete", func(ctx context.Context) error { return rt.Delete(ctx, "a") }},
		{"PendingCalls", func(ctx context.Context) error { _, _, err := rt.PendingCalls(ctx, "", 0); return err }},
		{"Metadata", func(ctx context.Context) error { _, err := rt.Metadata(ctx, "a"); return err }},
		{"MergeMetadata", func(ctx context.Context) error { return rt.MergeMetadata(ctx, "a", map[string]string{"k": "w"}) }},
		{"Chapters", func(ctx context.Context) error { _, err := rt.Chapters(ctx, "a", 0); return err }},
		{"HistoryView", func(ctx context.Context) error {
			_, err := rt.HistoryView(ctx, "a", lazarus.HistoryOptions{})
			return err
		}},
		{"SubscribeWith", func(ctx context.Context) error {
			_, err := rt.SubscribeWith(ctx, "a", 0, lazarus.SubscribeOptions{})
			return err
		}},
		{"SendAndWait", func(ctx context.Context) error { _, err := rt.SendAndWait(ctx, "a", "more", user); return err }},
		{"Schedule", func(ctx context.Context) error {
			_, err := rt.Schedule(ctx, "a", lazarus.ScheduleSpec{After: time.Hour, Text: "y"}, user)
			return err
		}},
		{"Schedules", func(ctx context.Context) error { _, err := rt.Schedules(ctx, "a"); return err }},
		{"CancelSchedule", func(ctx context.Context) error { return rt.CancelSchedule(ctx, "a", sc.GetId()) }},
		{"Reschedule", func(ctx context.Context) error { return rt.Reschedule(ctx, callID, time.Now().Add(time.Hour)) }},
	}
	for _, c := range calls {
		require.ErrorIs(t, c.f(ended), context.Canceled, c.name)
	}
	after, err := rt.History(ctx, "a", 0, 0)
	require.NoError(t, err)
	require.Len(t, after, len(before), "nothing appended")
	md, err := rt.Metadata(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"k": "v"}, md)
	scs, err := rt.Schedules(ctx, "a")
	require.NoError(t, err)
	require.Len(t, scs, 1)
	s, err := rt.Settings(ctx, "a")
	require.NoError(t, err)
	require.Empty(t, s.SystemPrompt)

	require.NoError(t, rt.Close())
	for _, c := range calls {
		require.ErrorIs(t, c.f(ctx), lazarus.ErrClosed, c.name)
	}
}

// An ended conversation runs no turn, not even on an explicit Wake (which
// otherwise runs a failed turn again); Edit fails with ErrEnded; End of a
// deleted conversation wraps ErrDeleted.
func TestEndedConversationRunsNoTurnOnWake(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	model := scripted.New(scripted.Options{})
	rt := openContract(t, memjournal.New(memjournal.Options{}), model, 0)
	model.PushError("c", agent.ErrRefused)
	_, err := rt.SendAndWait(ctx, "c", "hello", user)
	require.ErrorIs(t, err, lazarus.ErrTurnFailed)
	require.NoError(t, rt.End(ctx, "c"), "a failed turn is at rest")
	calls := model.Calls("c")
	before, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.NoError(t, rt.Wake(ctx, "c"))
	rt.Kill("c")
	require.NoError(t, rt.Wake(ctx, "c"))
	require.NoError(t, rt.End(ctx, "c"), "the wakes ran nothing: still at rest")
	require.Equal(t, calls, model.Calls("c"), "no model call")
	after, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Len(t, after, len(before))
	_, err = rt.Edit(ctx, "c", 1, "again", user)
	require.ErrorIs(t, err, journal.ErrEnded)
	_, err = rt.SendAndWait(ctx, "c", "more", user)
	require.ErrorIs(t, err, journal.ErrEnded)

	answered(ctx, t, rt, model, "d")
	require.NoError(t, rt.Delete(ctx, "d"))
	require.ErrorIs(t, rt.End(ctx, "d"), journal.ErrDeleted)
	require.ErrorIs(t, rt.Rewind(ctx, "d", 0, lazarus.RewindOptions{}, user), journal.ErrDeleted)
	_, err = rt.Edit(ctx, "d", 1, "x", user)
	require.ErrorIs(t, err, journal.ErrDeleted)
	require.ErrorIs(t, rt.Fork(ctx, "d", 1, "d2"), journal.ErrDeleted)
	require.ErrorIs(t, rt.Configure(ctx, "d", agent.Settings{SystemPrompt: "x"}), journal.ErrDeleted)
	_, err = rt.Settings(ctx, "d")
	require.ErrorIs(t, err, journal.ErrDeleted)
	_, err = rt.Metadata(ctx, "d")
	require.ErrorIs(t, err, journal.ErrDeleted)
	require.ErrorIs(t, rt.MergeMetadata(ctx, "d", map[string]string{"k": "v"}), journal.ErrDeleted)
	_, err = rt.Schedule(ctx, "d", lazarus.ScheduleSpec{After: time.Hour, Text: "x"}, user)
	require.ErrorIs(t, err, journal.ErrDeleted)
	_, err = rt.Chapters(ctx, "d", 0)
	require.ErrorIs(t, err, journal.ErrDeleted)
	_, err = rt.HistoryView(ctx, "d", lazarus.HistoryOptions{})
	require.ErrorIs(t, err, journal.ErrDeleted)
	require.ErrorIs(t, rt.Delete(ctx, "d"), journal.ErrDeleted)
	require.ErrorIs(t, rt.Wake(ctx, "d"), journal.ErrDeleted)
	_, err = rt.SendAndWait(ctx, "d", "x", user)
	require.ErrorIs(t, err, journal.ErrDeleted)
	require.ErrorIs(t, rt.Fork(ctx, "c", 1, "d"), journal.ErrDeleted, "a deleted newID")
}

// Resolve checks the runtime and ctx before its result, like every entry
// call, and never quotes an oversized id whole.
func TestResolveBadResultAfterCloseAndHostileID(t *testing.T) {
	ctx := context.Background()
	model := scripted.New(scripted.Options{})
	rt := openContract(t, memjournal.New(memjournal.Options{}), model, 0)
	big := strings.Repeat("x", 100000)
	huge := `"` + strings.Repeat("y", agent.MaxResultBytes) + `"`
	err := rt.Resolve(ctx, big, huge, user)
	require.ErrorIs(t, err, journal.ErrInvalid)
	require.Less(t, len(err.Error()), 1024)
	ended, cancelNow := context.WithCancel(ctx)
	cancelNow()
	require.ErrorIs(t, rt.Resolve(ended, "call", "not json", user), context.Canceled)
	require.NoError(t, rt.Close())
	require.ErrorIs(t, rt.Resolve(ctx, "call", "not json", user), lazarus.ErrClosed)
	require.ErrorIs(t, rt.Resolve(ctx, "call", huge, user), lazarus.ErrClosed)
}

// An oversized tool choice or agent name is refused with an error that
// does not quote it whole.
func TestOversizedSettingsAndAgentNamesGetShortErrors(t *testing.T) {
	ctx := context.Background()
	model := scripted.New(scripted.Options{})
	rt := openContract(t, memjournal.New(memjournal.Options{}), model, 0)
	big := strings.Repeat("x", 100000)
	err := rt.Configure(ctx, "c", agent.Settings{ToolChoice: big})
	require.ErrorIs(t, err, journal.ErrInvalid)
	require.Less(t, len(err.Error()), 1024)
	_, err = rt.SendMessage(ctx, "c", textMsg("hi"), lazarus.SendOptions{Agent: big}, user)
	require.ErrorIs(t, err, lazarus.ErrUnknownAgent)
	require.ErrorIs(t, err, journal.ErrInvalid)
	require.Less(t, len(err.Error()), 1024)
	require.ErrorIs(t, agent.ValidateSettings(agent.Settings{ToolChoice: big}, nil), journal.ErrInvalid)
	require.Less(t, len(agent.ValidateSettings(agent.Settings{ToolChoice: big}, nil).Error()), 1024)
}

// SweepFileBlobs keeps the entry contract: with an ended ctx it returns
// ctx.Err(), after Close ErrClosed, and removes nothing (it swept a Store
// the caller still owns after Close).
func TestSweepFileBlobsWithEndedContextOrAfterClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := memjournal.New(memjournal.Options{})
	rt, err := lazarus.Open(lazarus.Options{
		Store: store, Model: scripted.New(scripted.Options{}), IdleTimeout: -1,
		Files: lazarus.FilesOptions{Root: t.TempDir(), BlobTTL: -1},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	content := "an upload no record names"
	sum := sha256.Sum256([]byte(content))
	name := hex.EncodeToString(sum[:])
	_, err = store.PutFileBlob(ctx, name, int64(len(content)), strings.NewReader(content))
	require.NoError(t, err)

	ended, cancelNow := context.WithCancel(context.Background())
	cancelNow()
	_, err = rt.SweepFileBlobs(ended)
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, rt.Close())
	_, err = rt.SweepFileBlobs(ctx)
	require.ErrorIs(t, err, lazarus.ErrClosed)
	_, err = store.FileBlob(ctx, name)
	require.NoError(t, err, "nothing swept")
}

// GCAudit keeps the entry contract: with an ended ctx it returns
// ctx.Err(), after Close ErrClosed, and removes nothing (after Close it
// swept the audit of a Store the caller still owns).
func TestGCAuditWithEndedContextOrAfterClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clock := actorstest.NewManualClock(time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC))
	store := memjournal.New(memjournal.Options{Audit: true})
	defer store.Close()
	model := scripted.New(scripted.Options{})
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: model, Clock: clock, IdleTimeout: -1,
		Audit: lazarus.AuditOptions{Enabled: true, TTL: time.Hour}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	answered(ctx, t, rt, model, "a")
	rows := func() int {
		calls, err := store.ModelCalls(ctx, "a")
		require.NoError(t, err)
		return len(calls)
	}
	require.Equal(t, 1, rows())

	ended, cancelNow := context.WithCancel(context.Background())
	cancelNow()
	n, err := rt.GCAudit(ended)
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, n)
	require.NoError(t, rt.Close())
	clock.Advance(2 * time.Hour) // the row is older than the TTL; Close stopped the sweeper
	n, err = rt.GCAudit(ctx)
	require.ErrorIs(t, err, lazarus.ErrClosed)
	require.Zero(t, n)
	require.Equal(t, 1, rows(), "nothing swept")
}

// ctxBlindStore is a Store whose reads and metadata writes go on whatever
// their ctx, as an adapter need not check it before a quick call.
type ctxBlindStore struct{ *memjournal.Store }

func (s ctxBlindStore) Conversation(_ context.Context, id string) (*messages.Conversation, error) {
	return s.Store.Conversation(context.Background(), id)
}

func (s ctxBlindStore) Metadata(_ context.Context, id string) (map[string]string, error) {
	return s.Store.Metadata(context.Background(), id)
}

func (s ctxBlindStore) PutMetadata(_ context.Context, id string, kv map[string]string) error {
	return s.Store.PutMetadata(context.Background(), id, kv)
}

func (s ctxBlindStore) ListPendingToolCalls(_ context.Context, cursor string, limit int) ([]*messages.ToolCallRecord, string, error) {
	return s.Store.ListPendingToolCalls(context.Background(), cursor, limit)
}

// The Runtime checks an ended ctx itself, at the entry of every call, not
// through its Store: Metadata, MergeMetadata, Settings and PendingCalls
// left it to the Store, so over one that does not check (ctxBlindStore)
// they answered, and MergeMetadata wrote, with a ctx that had ended.
func TestEndedContextIsCheckedWhateverTheStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := ctxBlindStore{memjournal.New(memjournal.Options{})}
	model := scripted.New(scripted.Options{})
	rt := openContract(t, store, model, 0)
	answered(ctx, t, rt, model, "a")
	suspend(ctx, t, rt, model, "c")
	require.NoError(t, rt.MergeMetadata(ctx, "a", map[string]string{"k": "v"}))

	ended, cancelNow := context.WithCancel(context.Background())
	cancelNow()
	calls := []struct {
		name string
		f    func(ctx context.Context) error
	}{
		{"Metadata", func(ctx context.Context) error { _, err := rt.Metadata(ctx, "a"); return err }},
		{"MergeMetadata", func(ctx context.Context) error { return rt.MergeMetadata(ctx, "a", map[string]string{"k": "w"}) }},
		{"Settings", func(ctx context.Context) error { _, err := rt.Settings(ctx, "a"); return err }},
		{"PendingCalls", func(ctx context.Context) error { _, _, err := rt.PendingCalls(ctx, "", 0); return err }},
		{"Delete", func(ctx context.Context) error { return rt.Delete(ctx, "a") }},
		{"Schedules", func(ctx context.Context) error { _, err := rt.Schedules(ctx, "a"); return err }},
		{"CancelSchedule", func(ctx context.Context) error { return rt.CancelSchedule(ctx, "a", "s") }},
	}
	for _, c := range calls {
		err := c.f(ended)
		require.ErrorIs(t, err, context.Canceled, c.name)
		require.Contains(t, err.Error(), "lazarus: ", c.name)
	}
	md, err := rt.Metadata(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"k": "v"}, md, "nothing written")
}
