package crash

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
)

// The fuzz targets feed the Runtime's public inputs: conversation ids,
// message text and sizes, tool calls (name and arguments) in a model's
// answer, and answers to human calls (tool call ids and results). Each input
// runs on a fresh Runtime on Pebble (on an in-memory filesystem). For every
// input: nothing panics; every error wraps one of the journal sentinels (or
// lazarus.ErrClosed); nothing is half-written (a refused input leaves no
// trace; an accepted one leaves a log that passes verifyStore).
//
// Run a target with: go test ./tests/crash -run '^$' -fuzz '^FuzzSend$'.
// Plain `go test` runs the committed seeds in testdata/fuzz.

var sentinels = []error{journal.ErrInvalid, journal.ErrStale, journal.ErrNotFound, journal.ErrClosed,
	journal.ErrConflict, journal.ErrCorrupt, journal.ErrDeleted, lazarus.ErrClosed}

func requireSentinel(t *testing.T, err error, what string) {
	t.Helper()
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return
		}
	}
	t.Fatalf("%s: error wraps no sentinel: %v", what, err)
}

// fuzzRig is a Runtime with the workload's tools (work: server; approve:
// human), a scripted model, on Pebble on an in-memory filesystem.
type fuzzRig struct {
	rt    *lazarus.Runtime
	store *pebblejournal.Store
	model *scripted.Model
	ctx   context.Context
}

func newFuzzRig(t *testing.T) *fuzzRig {
	store, err := pebblejournal.Open("db", pebblejournal.Options{FS: vfs.NewMem(), CacheSize: 1 << 20, MemTableSize: 4 << 20})
	require.NoError(t, err)
	model := scripted.New(scripted.Options{})
	rt, err := lazarus.Open(lazarus.Options{
		Store: store, Model: model, IdleTimeout: -1, NoResume: true,
		Tools: []agent.Tool{
			{Name: toolWork, Executor: messages.Executor_EXECUTOR_SERVER, Run: func(context.Context, agent.Invocation) (string, error) {
				return `{"done":true}`, nil
			}},
			{Name: toolApprove, Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: time.Hour},
		},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(func() {
		cancel()
		require.NoError(t, closeWithin(t, "Runtime.Close", rt.Close))
		require.NoError(t, store.Close())
	})
	return &fuzzRig{rt: rt, store: store, model: model, ctx: ctx}
}

// untouched checks that the store holds no conversation at all.
func (r *fuzzRig) untouched(t *testing.T) {
	t.Helper()
	convs, _, err := r.store.ListConversations(r.ctx, "", 10)
	require.NoError(t, err)
	require.Empty(t, convs, "a refused input left a conversation behind")
}

// FuzzSend: any conversation id, any text, repeated up to sizes beyond
// journal.MaxEventBytes.
func FuzzSend(f *testing.F) {
	f.Add("conv", "hello", uint16(1))
	f.Fuzz(func(t *testing.T, conv, text string, repeat uint16) {
		if n := len(text) * int(repeat); n > 2*journal.MaxEventBytes {
			repeat = uint16(2 * journal.MaxEventBytes / max(len(text), 1))
		}
		text = strings.Repeat(text, int(repeat))
		r := newFuzzRig(t)
		sub, subErr := r.rt.Subscribe(r.ctx, conv, 0)
		seq, err := r.rt.Send(r.ctx, conv, text, agent.Scope{UserID: "u"})
		if err != nil {
			requireSentinel(t, err, "Send")
			r.untouched(t)
			return
		}
		require.NoError(t, subErr, "Send accepted an id Subscribe refuses")
		require.EqualValues(t, 1, seq)
		for u := range sub {
			if u.Event != nil && isFinal(u.Event) {
				break
			}
		}
		evs, err := r.rt.History(r.ctx, conv, 0, 0)
		require.NoError(t, err)
		require.Len(t, evs, 2, "the message and the model's answer")
		require.Equal(t, text, textOf(evs[0].GetUserMsg().GetContent()))
		v := verifyStore(r.ctx, r.store, checkInput{convs: []string{conv}, final: true})
		require.Empty(t, v.violations, "%s", v)
	})
}

// FuzzModelReply: a model answer with any text and one tool call of any
// name and arguments; a human call is then answered with any result. A
// call the model got wrong gets an error result and the model answers
// again; an answer the Store refuses fails the turn durably (turn_failed),
// with nothing of the answer written.
func FuzzModelReply(f *testing.F) {
	f.Add("working", toolWork, `{"key":"k"}`, `{"approved":true}`)
	f.Fuzz(func(t *testing.T, text, tool, args, result string) {
		r := newFuzzRig(t)
		const conv = "fuzz"
		r.model.Push(conv, scripted.Reply(text, scripted.Call(tool, args)), scripted.Text("done"))
		sub, err := r.rt.Subscribe(r.ctx, conv, 0)
		require.NoError(t, err)
		_, err = r.rt.Send(r.ctx, conv, "go", agent.Scope{UserID: "u"})
		require.NoError(t, err)
		rejected := false
	wait:
		for u := range sub {
			switch {
			case u.TurnEnd != nil && u.TurnEnd.Outcome == lazarus.TurnFailed:
				requireSentinel(t, u.TurnEnd.Err, "a failed turn")
				require.ErrorIs(t, u.TurnEnd.Err, journal.ErrInvalid, "only a bad answer fails a turn here")
				rejected = true
				break wait
			case u.Err != nil:
				t.Fatalf("unexpected error update: %v", u.Err)
			case u.Event == nil:
			case len(u.Event.GetSuspension().GetPending()) == 1:
				id := u.Event.GetSuspension().GetPending()[0].GetToolCallId()
				if err := r.rt.Resolve(r.ctx, id, result, agent.Scope{UserID: "u"}); err != nil {
					requireSentinel(t, err, "Resolve")
					require.NoError(t, r.rt.Reject(r.ctx, id, result, agent.Scope{UserID: "u"}))
				}
			case isFinal(u.Event):
				break wait
			}
		}
		require.NoError(t, r.ctx.Err(), "the turn never ended")
		evs, err := r.rt.History(r.ctx, conv, 0, 0)
		require.NoError(t, err)
		if rejected {
			require.Len(t, evs, 2, "nothing of a rejected answer is written")
			require.NotNil(t, evs[1].GetTurnFailed())
		}
		v := verifyStore(r.ctx, r.store, checkInput{convs: []string{conv}, final: !rejected})
		require.Empty(t, v.violations, "%s", v)
	})
}

// FuzzResolve: answers with any tool call id (or the pending call's own)
// and any result.
func FuzzResolve(f *testing.F) {
	f.Add(true, "", `{"approved":true}`)
	f.Fuzz(func(t *testing.T, own bool, id, result string) {
		r := newFuzzRig(t)
		const conv = "fuzz"
		r.model.Push(conv, scripted.Reply("", scripted.Call(toolApprove, `{}`)), scripted.Text("done"))
		sub, err := r.rt.Subscribe(r.ctx, conv, 0)
		require.NoError(t, err)
		_, err = r.rt.Send(r.ctx, conv, "go", agent.Scope{UserID: "u"})
		require.NoError(t, err)
		var pending string
		for u := range sub {
			if p := u.Event.GetSuspension().GetPending(); len(p) == 1 {
				pending = p[0].GetToolCallId()
				break
			}
		}
		require.NotEmpty(t, pending)
		if own {
			id = pending
		}
		before, err := r.rt.History(r.ctx, conv, 0, 0)
		require.NoError(t, err)
		err = r.rt.Resolve(r.ctx, id, result, agent.Scope{UserID: "u"})
		if err != nil {
			requireSentinel(t, err, "Resolve")
			row, rerr := r.store.ToolCall(r.ctx, pending)
			require.NoError(t, rerr)
			require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, row.GetStatus(), "a refused answer changed the call")
			after, herr := r.rt.History(r.ctx, conv, 0, 0)
			require.NoError(t, herr)
			require.Len(t, after, len(before), "a refused answer wrote to the log")
			return
		}
		require.Equal(t, pending, id, "an answer to another id succeeded")
		for u := range sub {
			if u.Event != nil && isFinal(u.Event) {
				break
			}
		}
		v := verifyStore(r.ctx, r.store, checkInput{convs: []string{conv}, final: true,
			ledger: &ledger{resolves: map[string][]string{pending: {messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED.String()}}}})
		require.Empty(t, v.violations, "%s", v)
	})
}
