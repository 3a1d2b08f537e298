package crash

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
)

// awaitFinal waits until conv's log holds the model's final answer after
// seq after.
func awaitFinal(ctx context.Context, t *testing.T, rt *lazarus.Runtime, conv string, after uint64) {
	t.Helper()
	sub, err := rt.Subscribe(ctx, conv, after)
	require.NoError(t, err)
	for u := range sub {
		if u.Event != nil && isFinal(u.Event) {
			return
		}
	}
	t.Fatalf("conversation %q: no final answer after seq %d: %v", conv, after, ctx.Err())
}

// TestThreatIDsIsolated: through the Runtime, no conversation id reads
// another's events, even ids that are prefixes of each other or differ
// after a NUL or a separator a key layout might use. (The Store's own
// isolation is the conformance suite's KeyIsolation case and
// pebblejournal's key tests and FuzzKeyEncoding.)
func TestThreatIDsIsolated(t *testing.T) {
	ids := []string{"a", "a/b", "ab", "a\x00b", "a\x00", "\x00", "a\x00\x00", "a\x01", "a\u00ff", "a "}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := pebblejournal.Open("db", pebblejournal.Options{FS: vfs.NewMem()})
	require.NoError(t, err)
	defer func() { require.NoError(t, store.Close()) }()
	model := scripted.New(scripted.Options{})
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: model, IdleTimeout: -1})
	require.NoError(t, err)
	defer func() { require.NoError(t, rt.Close()) }()
	for i, id := range ids {
		for range i + 1 { // a different length per id
			model.Push(id, scripted.Text("answer for "+id))
			seq, err := rt.Send(ctx, id, "message for "+id, agent.Scope{UserID: "u"})
			require.NoError(t, err)
			awaitFinal(ctx, t, rt, id, seq)
		}
	}
	for i, id := range ids {
		evs, err := rt.History(ctx, id, 0, 0)
		require.NoError(t, err)
		require.Len(t, evs, 2*(i+1), "%q", id)
		for _, ev := range evs {
			text := textOf(ev.GetUserMsg().GetContent()) + textOf(ev.GetAssistantMsg().GetContent())
			require.Contains(t, []string{"message for " + id, "answer for " + id}, text, "History of %q", id)
		}
		sub, err := rt.Subscribe(ctx, id, 0)
		require.NoError(t, err)
		for range evs {
			u := <-sub
			text := textOf(u.Event.GetUserMsg().GetContent()) + textOf(u.Event.GetAssistantMsg().GetContent())
			require.Contains(t, []string{"message for " + id, "answer for " + id}, text, "Subscribe to %q", id)
		}
	}
}

// rawBytes returns the concatenated contents of every file in fs under dir.
func rawBytes(t *testing.T, fs vfs.FS, dir string) []byte {
	t.Helper()
	names, err := fs.List(dir)
	require.NoError(t, err)
	var all []byte
	for _, name := range names {
		f, err := fs.Open(fs.PathJoin(dir, name))
		require.NoError(t, err)
		b, err := io.ReadAll(f)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		all = append(all, b...)
	}
	return all
}

// TestThreatScopeNeverPersisted: the caller's scope (user, roles,
// permissions, handles) reaches the tools of the turn it starts, and only
// its identity (user id and roles) is written, as the author of the
// message and the resolver of the answer: no byte of its permissions or
// handles is anywhere in the store's files after a conversation that used
// it for a send, a server tool, a tool that requires a user, and an answer
// to a human call. The scan is checked against a marker the user message
// does carry.
func TestThreatScopeNeverPersisted(t *testing.T) {
	const (
		marker = "marker-3e8a-in-the-message"
		user   = "user-7c1e-identity"
		role   = "role-4f0d-identity"
		perm   = "perm-5b2a-secret"
		handle = "handle-9d4f-secret"
	)
	scope := agent.Scope{UserID: user, Roles: []string{role}, Permissions: []string{perm}, Values: map[string]any{"token": handle}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fs := vfs.NewMem()
	store, err := pebblejournal.Open("db", pebblejournal.Options{FS: fs})
	require.NoError(t, err)
	model := scripted.New(scripted.Options{})
	sawScope := make(chan agent.Scope, 2)
	rt, err := lazarus.Open(lazarus.Options{Store: store, Model: model, IdleTimeout: -1, Tools: []agent.Tool{
		{Name: "whoami", Executor: messages.Executor_EXECUTOR_SERVER, RequiresUser: true, Run: func(_ context.Context, inv agent.Invocation) (string, error) {
			sawScope <- inv.Scope
			return `{"ok":true}`, nil
		}},
		{Name: toolApprove, Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Hour},
	}})
	require.NoError(t, err)
	model.Push("c",
		scripted.Reply("checking", scripted.Call("whoami", `{}`)),
		scripted.Reply("asking", scripted.Call(toolApprove, `{}`)),
		scripted.Text("done"))
	sub, err := rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	_, err = rt.Send(ctx, "c", marker, scope)
	require.NoError(t, err)
	for u := range sub {
		if p := u.Event.GetSuspension().GetPending(); len(p) == 1 {
			require.NoError(t, rt.Resolve(ctx, p[0].GetToolCallId(), `{"approved":true}`, scope))
		}
		if u.Event != nil && isFinal(u.Event) {
			break
		}
	}
	select {
	case got := <-sawScope:
		require.Equal(t, user, got.UserID, "the tool saw the caller's scope")
	case <-ctx.Done():
		t.Fatal("the tool never ran")
	}
	require.NoError(t, rt.Close())
	require.NoError(t, store.Close())

	raw := rawBytes(t, fs, "db")
	require.True(t, bytes.Contains(raw, []byte(marker)), "the scan sees what was written")
	require.True(t, bytes.Contains(raw, []byte(user)), "the identity is recorded")
	require.True(t, bytes.Contains(raw, []byte(role)), "the identity is recorded")
	for _, secret := range []string{perm, handle} {
		require.False(t, bytes.Contains(raw, []byte(secret)), "%q is in the store's files", secret)
	}
}

// TestThreatAuditOffByDefault: a Runtime opened with default options on a
// directory records no model call: what was rendered to the model is not
// kept. Turning audit on records every turn.
func TestThreatAuditOffByDefault(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, on := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "db")
		opts := lazarus.Options{Dir: dir, Model: scripted.New(scripted.Options{})}
		opts.Audit.Enabled = on
		rt, err := lazarus.Open(opts)
		require.NoError(t, err)
		for range 3 {
			seq, err := rt.Send(ctx, "c", "hello", agent.Scope{UserID: "u"})
			require.NoError(t, err)
			awaitFinal(ctx, t, rt, "c", seq)
		}
		calls, err := rt.Store().ModelCalls(ctx, "c")
		require.NoError(t, err)
		require.NoError(t, rt.Close())
		if on {
			require.Len(t, calls, 3, "with audit on, every turn is recorded")
		} else {
			require.Empty(t, calls, "audit is off by default")
		}
	}
}

// TestThreatDeletionIsFinal: once a conversation is deleted (with the
// Runtime down, as an operator does), nothing brings it back: not a new
// Send to its id, not a Wake, not the resumption on Open, not the deadline
// of its pending call, not a late answer to that call (ErrStale: the call is
// gone with its conversation). Every entry call naming the id says
// ErrDeleted, every time: the revival reads the row, and the Store's lookup
// of a deleted conversation is ErrDeleted, whatever state the previous
// failed activation is in (a Wake used to find it still stopping, with its
// failed write as the cause, or gone, and then revived an empty
// conversation).
func TestThreatDeletionIsFinal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "db")
	clock := actorstest.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
	model := scripted.New(scripted.Options{})
	tools := []agent.Tool{{Name: toolApprove, Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Hour}}
	rt, err := lazarus.Open(lazarus.Options{Dir: dir, Model: model, Clock: clock, Tools: tools})
	require.NoError(t, err)
	model.Push("gone", scripted.Reply("", scripted.Call(toolApprove, `{}`)))
	model.Push("kept", scripted.Text("still here"))
	sub, err := rt.Subscribe(ctx, "gone", 0)
	require.NoError(t, err)
	_, err = rt.Send(ctx, "gone", "secret plan", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	var callID string
	for u := range sub {
		if p := u.Event.GetSuspension().GetPending(); len(p) == 1 {
			callID = p[0].GetToolCallId()
			break
		}
	}
	require.NotEmpty(t, callID)
	_, err = rt.Send(ctx, "kept", "hello", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	awaitFinal(ctx, t, rt, "kept", 0)
	require.NoError(t, rt.Close())

	s, err := pebblejournal.Open(dir, pebblejournal.Options{})
	require.NoError(t, err)
	require.NoError(t, s.DeleteConversation(ctx, "gone"))
	require.NoError(t, s.Close())

	rt, err = lazarus.Open(lazarus.Options{Dir: dir, Model: model, Clock: clock, Tools: tools})
	require.NoError(t, err)
	defer func() { require.NoError(t, rt.Close()) }()
	clock.Advance(2 * time.Hour) // past the deleted call's deadline
	err = rt.Resolve(ctx, callID, `{"approved":true}`, agent.Scope{UserID: "u"})
	require.ErrorIs(t, err, journal.ErrStale, "a late answer to a deleted call")
	err = rt.Reject(ctx, callID, "no", agent.Scope{UserID: "u"})
	require.ErrorIs(t, err, journal.ErrStale, "a late rejection of a deleted call")
	// Each call alternates with the others, so that each meets the failed
	// activation of the previous one in every state (live, stopping, gone).
	for i := range 5 {
		_, err = rt.Send(ctx, "gone", "are you there?", agent.Scope{UserID: "u"})
		require.ErrorIs(t, err, journal.ErrDeleted, "a send to a deleted id (round %d)", i)
		require.ErrorIs(t, rt.Wake(ctx, "gone"), journal.ErrDeleted, "a wake of a deleted id (round %d)", i)
		_, err = rt.SendMessage(ctx, "gone", &messages.UserMessage{Content: []*messages.ContentPart{
			{Part: &messages.ContentPart_Text{Text: "retry"}}}}, lazarus.SendOptions{RequestID: "r1"}, agent.Scope{UserID: "u"})
		require.ErrorIs(t, err, journal.ErrDeleted, "an idempotent send to a deleted id (round %d)", i)
		_, err = rt.History(ctx, "gone", 0, 0)
		require.ErrorIs(t, err, journal.ErrDeleted, "the history of a deleted id (round %d)", i)
		_, err = rt.Subscribe(ctx, "gone", 0)
		require.ErrorIs(t, err, journal.ErrDeleted, "a subscription to a deleted id (round %d)", i)
	}
	_, err = rt.Store().Conversation(ctx, "gone")
	require.ErrorIs(t, err, journal.ErrDeleted, "no row came back")
	last, err := rt.Store().LastSeq(ctx, "gone")
	require.NoError(t, err)
	require.Zero(t, last, "nothing was written")
	_, err = rt.Store().ToolCall(ctx, callID)
	require.ErrorIs(t, err, journal.ErrNotFound)
	kept, err := rt.History(ctx, "kept", 0, 0)
	require.NoError(t, err)
	require.Len(t, kept, 2, "the other conversation is untouched")
}
