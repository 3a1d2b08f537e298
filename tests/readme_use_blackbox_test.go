package tests

// Black-box tests of README.md's "Use" and "Models" sections: each snippet
// run as written (a scripted or in-process model instead of a provider),
// and the promises of the prose the other tests leave out.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/openai"
	"github.com/lazarusrt/lazarus/agent/providertest"
	"github.com/lazarusrt/lazarus/agent/retry"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/render"
	"github.com/lazarusrt/lazarus/snapshot"
)

// TestReadmeUseSnippet runs the "Use" section's program as written, on a
// Pebble directory: the turn suspends on the approval, bob (an approver)
// answers it, and the subscription from the suspension's seq shows the
// resumed turn to its answered end, one line per update; a second answer
// is too late (journal.ErrStale).
func TestReadmeUseSnippet(t *testing.T) {
	ctx := ctxT(t)
	lookupOrder := func(ctx context.Context, inv agent.Invocation) (string, error) { return `{"total":120}`, nil }
	loadScope := func(ctx context.Context, id agent.Identity) (agent.Scope, error) {
		return agent.Scope{UserID: id.UserID, Roles: id.Roles}, nil
	}
	handles := map[string]any{"db": "pool"}

	// From here to the end of the if, README.md's code (with a test
	// directory and the error checks).
	model := agent.ModelFunc(func(ctx context.Context, turn agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
		if turn.Context[len(turn.Context)-1].GetUserMsg() != nil {
			return agent.Reply("This refund needs approval.", agent.Call("approve_refund", `{"amount":120}`)), nil
		}
		return agent.Text("Refund sent."), nil
	})
	rt, err := lazarus.Open(lazarus.Options{
		Dir:   t.TempDir(),
		Model: model,
		Tools: []agent.Tool{
			{Name: "lookup_order", Executor: messages.Executor_EXECUTOR_SERVER, Run: lookupOrder},
			{Name: "approve_refund", Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: 2 * time.Hour,
				Authorizer: agent.RequireRole("approver")}, // who may answer
		},
		ScopeLoader: loadScope,
	})
	require.NoError(t, err)
	defer rt.Close()

	alice := agent.Scope{UserID: "alice", Values: handles}
	end, err := rt.SendAndWait(ctx, "conv-42", "refund order 42", alice)
	require.NoError(t, err)
	require.Equal(t, lazarus.TurnSuspended, end.Outcome)
	require.Len(t, end.Pending, 1)
	var lines []string
	var last lazarus.Update
	if end.Outcome == lazarus.TurnSuspended {
		updates, err := rt.Subscribe(ctx, "conv-42", end.Seq)
		require.NoError(t, err)
		bob := agent.Scope{UserID: "bob", Roles: []string{"approver"}}
		err = rt.Resolve(ctx, end.Pending[0].GetToolCallId(), `{"approved":true}`, bob)
		require.NoError(t, err)
		for u := range updates {
			lines = append(lines, render.Update(u, false))
			if u.TurnEnd != nil {
				last = u
				break
			}
		}
		// Too late: the call is answered.
		err = rt.Resolve(ctx, end.Pending[0].GetToolCallId(), `{"approved":true}`, bob)
		require.ErrorIs(t, err, journal.ErrStale)
	}
	require.NotNil(t, last.TurnEnd, "the subscription ended before the turn did")
	require.Equal(t, lazarus.TurnAnswered, last.TurnEnd.Outcome)
	require.Equal(t, "Refund sent.", last.TurnEnd.Text)
	require.NotEmpty(t, lines)
	for _, l := range lines {
		require.NotContains(t, strings.TrimRight(l, "\n"), "\n", "render.Update gave more than one line")
	}
	// Only UserID and Roles are persisted: the author of the message is
	// alice, with no trace of her Values.
	evs, err := rt.History(ctx, "conv-42", 0, 0)
	require.NoError(t, err)
	require.Equal(t, "alice", evs[0].GetAuthor().GetUserId())
	require.NotContains(t, evs[0].String(), "pool")
	var resolver *messages.Identity
	for _, ev := range evs {
		if r := ev.GetResolution(); r != nil {
			resolver = r.GetResolver()
		}
	}
	require.Equal(t, "bob", resolver.GetUserId())
}

// TestReadmeModelsSnippet runs the "Models" section's program as written
// against a loopback Chat Completions server named by the environment
// (OptionsFromEnv): the answer is the streamed text, the model's name is
// recorded on it, and past ~16k estimated tokens the model writes a
// summary whose version is "llm/1:<model>".
func TestReadmeModelsSnippet(t *testing.T) {
	ctx := ctxT(t)
	body, err := os.ReadFile("../agent/openai/testdata/text.txt")
	require.NoError(t, err)
	srv := providertest.ServeStream(t, body)
	t.Setenv("OPENAI_BASE_URL", srv.URL)
	t.Setenv("OPENAI_API_KEY", "test-key")
	t.Setenv("OPENAI_MODEL", "gpt-4o-mini")
	dir := t.TempDir()

	// README.md's code, with the error checks.
	m, err := openai.New(openai.OptionsFromEnv())
	require.NoError(t, err)
	rt, err := lazarus.Open(lazarus.Options{Dir: dir, Model: m,
		Summarizer: snapshot.LLM{Model: m},
		Summary:    snapshot.TokenBudget(16000)})
	require.NoError(t, err)
	defer rt.Close()

	// More events than the default KeepRecent (20), ~90 KB in all.
	long := strings.Repeat("order 42 was damaged in transit. ", 200)
	for i := range 14 {
		end, err := rt.SendAndWait(ctx, "conv", long, user)
		require.NoError(t, err, "turn %d", i)
		require.Equal(t, lazarus.TurnAnswered, end.Outcome)
		require.Equal(t, "Hello, world!", end.Text)
	}
	evs, err := rt.History(ctx, "conv", 0, 0)
	require.NoError(t, err)
	require.Equal(t, "gpt-4o-mini-2024-07-18", evs[len(evs)-1].GetAssistantMsg().GetModel())
	require.Eventually(t, func() bool {
		ch, err := rt.Chapters(ctx, "conv", 0)
		return err == nil && ch.Summary != nil
	}, wait, 5*time.Millisecond, "no summary past the token budget")
	ch, err := rt.Chapters(ctx, "conv", 0)
	require.NoError(t, err)
	require.Equal(t, "llm/1:gpt-4o-mini-2024-07-18", ch.Summary.GetVersion())
	require.Equal(t, "Hello, world!", ch.Summary.GetContent())
}

// TestReadmeUseRefusals checks the refusals the "Use" section promises, on
// one runtime, each with its sentinel and with nothing written: a
// Subscribe past the log's last event, an unknown agent (send, view), an
// anonymous or unauthorized answer, a fork onto an existing id or between
// a call and its result, a rewind past the log, an edit of anything but a
// user message, a metadata merge past journal.MaxRecordBytes, a call whose
// ctx has already ended, and every call after End.
func TestReadmeUseRefusals(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), func(o *lazarus.Options) {
		o.Agents = []lazarus.Agent{{Name: "critic"}}
	})
	ctx := ctxT(t)
	end := h.suspendOnApproval("c", "refund order 42")
	last := end.Seq
	evs, err := h.rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	nEvents := len(evs)
	unchanged := func(msg string) {
		t.Helper()
		evs, err := h.rt.History(ctx, "c", 0, 0)
		require.NoError(t, err)
		require.Len(t, evs, nEvents, "%s wrote to the log", msg)
	}

	_, err = h.rt.Subscribe(ctx, "c", last+1)
	require.ErrorIs(t, err, journal.ErrInvalid, "subscribe past the log")

	_, err = h.rt.SendMessage(ctx, "c", agent.UserMessage(agent.TextPart("hi")), lazarus.SendOptions{Agent: "nobody"}, user)
	require.ErrorIs(t, err, lazarus.ErrUnknownAgent)
	unchanged("a send to an unknown agent")
	_, err = h.rt.SubscribeWith(ctx, "c", 0, lazarus.SubscribeOptions{Agent: lazarus.ViewOf("nobody")})
	require.ErrorIs(t, err, lazarus.ErrUnknownAgent)
	_, err = h.rt.SubscribeWith(ctx, "c", 0, lazarus.SubscribeOptions{Agent: lazarus.ViewOf("")})
	require.NoError(t, err, "ViewOf(\"\") is the default agent's view")

	call := end.Pending[0].GetToolCallId()
	err = h.rt.Resolve(ctx, call, `{"approved":true}`, agent.Scope{})
	require.ErrorIs(t, err, lazarus.ErrForbidden, "an anonymous answer without AllowAnonymous")
	unchanged("a refused answer")

	require.NoError(t, h.rt.Fork(ctx, "c", 1, "c2"))
	require.ErrorIs(t, h.rt.Fork(ctx, "c", 1, "c2"), journal.ErrExists)
	var callSeq uint64
	for _, ev := range evs {
		if len(ev.GetAssistantMsg().GetToolCalls()) > 0 {
			callSeq = ev.GetSeq()
		}
	}
	require.NotZero(t, callSeq)
	require.ErrorIs(t, h.rt.Fork(ctx, "c", callSeq, "c3"), journal.ErrInvalid, "a fork point between a call and its result")

	require.ErrorIs(t, h.rt.Rewind(ctx, "c", last+5, lazarus.RewindOptions{}, user), journal.ErrInvalid)
	_, err = h.rt.Edit(ctx, "c", callSeq, "new text", user)
	require.ErrorIs(t, err, journal.ErrInvalid, "an edit of an assistant message")
	unchanged("refused rewinds and edits")

	require.NoError(t, h.rt.MergeMetadata(ctx, "c", map[string]string{"name": "refund", "owner": "alice"}))
	require.NoError(t, h.rt.MergeMetadata(ctx, "c", map[string]string{"owner": ""}))
	md, err := h.rt.Metadata(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"name": "refund"}, md, "an empty value removes a key")
	big := strings.Repeat("x", journal.MaxRecordBytes/2)
	err = h.rt.MergeMetadata(ctx, "c", map[string]string{"a": big, "b": big})
	require.ErrorIs(t, err, journal.ErrInvalid, "metadata past MaxRecordBytes")
	md, err = h.rt.Metadata(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"name": "refund"}, md)

	done, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = h.rt.Send(done, "c", "too late", user)
	require.ErrorIs(t, err, context.Canceled)
	err = h.rt.Resolve(done, call, `{"approved":true}`, agent.Scope{UserID: "bob"})
	require.ErrorIs(t, err, context.Canceled)
	unchanged("calls with an ended ctx")

	// End: later sends and rewinds fail with ErrEnded; history stays.
	require.NoError(t, h.rt.Resolve(ctx, call, `{"approved":true}`, agent.Scope{UserID: "bob"}))
	h.awaitEvent("c", last, func(ev *messages.Event) bool {
		return ev.GetAssistantMsg() != nil && len(ev.GetAssistantMsg().GetToolCalls()) == 0
	})
	require.NoError(t, h.rt.End(ctx, "c"))
	_, err = h.rt.Send(ctx, "c", "more", user)
	require.ErrorIs(t, err, journal.ErrEnded)
	require.ErrorIs(t, h.rt.Rewind(ctx, "c", 1, lazarus.RewindOptions{}, user), journal.ErrEnded)
	_, err = h.rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
}

// TestReadmeUseTurns checks promises of the "Use" section about turns: an
// answer with an unknown tool and arguments that are not a JSON object is
// kept, each bad call gets an "invalid" error result the model reads next,
// and its valid call runs; a send repeated with its RequestID answers the
// first seq and appends nothing; a panicking model fails the turn with
// agent.ErrPanicked, is not retried, leaves the conversation idle, and Wake
// runs the failed turn again; Reschedule with the zero time removes a
// deadline, and a call no longer pending gets journal.ErrStale.
func TestReadmeUseTurns(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), nil)
	ctx := ctxT(t)

	h.model.Push("bad", scripted.Reply("", scripted.Call("no_such_tool", `{}`),
		scripted.Call("lookup_order", `[1,2]`), scripted.Call("lookup_order", `{"order":42}`)),
		scripted.Text("corrected"))
	end, err := h.rt.SendAndWait(ctx, "bad", "look it up", user)
	require.NoError(t, err)
	require.Equal(t, lazarus.TurnAnswered, end.Outcome)
	require.Equal(t, "corrected", end.Text)
	require.Len(t, h.runs.of("lookup_order"), 1, "the valid call runs, the bad one does not")
	turns := h.model.Turns("bad")
	require.Len(t, turns, 2)
	var codes []string
	for _, m := range turns[1].Context {
		if r := m.GetToolResult(); r != nil {
			codes = append(codes, r.GetOutcome().GetError().GetCode())
		}
	}
	require.ElementsMatch(t, []string{"invalid", "invalid", ""}, codes, "what the model reads on its next call")

	seq1, err := h.rt.SendMessage(ctx, "idem", agent.UserMessage(agent.TextPart("pay")), lazarus.SendOptions{RequestID: "req-1"}, user)
	require.NoError(t, err)
	h.awaitEvent("idem", seq1, func(ev *messages.Event) bool { return ev.GetAssistantMsg() != nil })
	before, err := h.rt.History(ctx, "idem", 0, 0)
	require.NoError(t, err)
	seq2, err := h.rt.SendMessage(ctx, "idem", agent.UserMessage(agent.TextPart("pay")), lazarus.SendOptions{RequestID: "req-1"}, user)
	require.NoError(t, err)
	require.Equal(t, seq1, seq2)
	after, err := h.rt.History(ctx, "idem", 0, 0)
	require.NoError(t, err)
	require.Len(t, after, len(before), "a repeated RequestID appended")

	panicky := agent.ModelFunc(func(ctx context.Context, turn agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
		panic("boom")
	})
	var calls atomic.Int32
	var panicking atomic.Bool
	panicking.Store(true)
	h2 := newHarness(t, openStore(t, "memory"), func(o *lazarus.Options) {
		o.Model = agent.ModelFunc(func(ctx context.Context, turn agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
			calls.Add(1)
			if panicking.Load() {
				return panicky.Generate(ctx, turn, onDelta)
			}
			return agent.Text("fine"), nil
		})
	})
	end, err = h2.rt.SendAndWait(ctx, "p", "hello", user)
	require.ErrorIs(t, err, lazarus.ErrTurnFailed, "a failed end comes with an error")
	require.ErrorIs(t, err, agent.ErrPanicked)
	require.Equal(t, lazarus.TurnFailed, end.Outcome)
	require.ErrorIs(t, end.Err, agent.ErrPanicked)
	var te *lazarus.TurnError
	require.ErrorAs(t, end.Err, &te)
	require.EqualValues(t, 1, calls.Load(), "a panic is never retried")
	panicking.Store(false)
	ch, err := h2.rt.Subscribe(ctx, "p", end.Seq)
	require.NoError(t, err)
	require.NoError(t, h2.rt.Wake(ctx, "p"))
	u := h2.awaitUpdate(ch, func(u actors.Update) bool { return u.TurnEnd != nil })
	require.Equal(t, lazarus.TurnAnswered, u.TurnEnd.Outcome)
	require.Equal(t, "fine", u.TurnEnd.Text)

	sus := h.suspendOnApproval("r", "refund")
	call := sus.Pending[0].GetToolCallId()
	row := func() *messages.ToolCallRecord {
		rows, _, err := h.rt.PendingCalls(ctx, "", 100)
		require.NoError(t, err)
		for _, r := range rows {
			if r.GetId() == call {
				return r
			}
		}
		t.Fatalf("call %s not in PendingCalls", call)
		return nil
	}
	require.NotNil(t, row().GetDeadline(), "the tool's Timeout sets a deadline")
	require.NoError(t, h.rt.Reschedule(ctx, call, time.Time{}))
	require.Nil(t, row().GetDeadline(), "the zero time removes the deadline")
	require.NoError(t, h.rt.Resolve(ctx, call, `{"approved":true}`, agent.Scope{UserID: "bob"}))
	require.ErrorIs(t, h.rt.Reschedule(ctx, call, h.clock.Now().Add(time.Hour)), journal.ErrStale)
}

// TestReadmeUseKillAndRestart checks, on a Pebble directory, what the
// "Use" section promises across a Kill and a process restart: a
// subscription that starts mid-answer first gets the deltas streamed so
// far; a Kill mid-turn gives subscribers a cancelled end; a second Open of
// the directory fails with pebblejournal.ErrLocked; after Close every call
// returns lazarus.ErrClosed; the next Open resumes the conversation left
// mid-turn and not the one whose turn failed; and once an agent is no
// longer configured, an edit of a message to it and a view of it wrap
// ErrUnknownAgent.
func TestReadmeUseKillAndRestart(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	streamed := make(chan struct{})
	model1 := agent.ModelFunc(func(ctx context.Context, turn agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
		switch turn.ConversationID {
		case "mid":
			onDelta("Hel")
			onDelta("lo")
			close(streamed)
			<-ctx.Done()
			return nil, ctx.Err()
		case "failed":
			panic("boom")
		}
		return agent.Text("ok"), nil
	})
	rt1, err := lazarus.Open(lazarus.Options{Dir: dir, Model: model1, Agents: []lazarus.Agent{{Name: "critic"}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt1.Close() })

	critSeq, err := rt1.SendMessage(ctx, "agents", agent.UserMessage(agent.TextPart("review this")), lazarus.SendOptions{Agent: "critic"}, user)
	require.NoError(t, err)
	_, err = rt1.SendAndWait(ctx, "failed", "hello", user)
	require.ErrorIs(t, err, agent.ErrPanicked)

	seq, err := rt1.Send(ctx, "mid", "hello", user)
	require.NoError(t, err)
	recv(t, streamed, "delta streamed")
	ch, err := rt1.Subscribe(ctx, "mid", seq)
	require.NoError(t, err)
	var deltas string
	for deltas != "Hello" {
		u := recv(t, ch, "update")
		require.NotEmpty(t, u.Delta, "a subscription mid-answer first gets the deltas so far, got %+v", u)
		deltas += u.Delta
	}
	require.True(t, rt1.Kill("mid"))
	for u := range ch {
		if u.TurnEnd != nil {
			require.Equal(t, lazarus.TurnCancelled, u.TurnEnd.Outcome)
			break
		}
	}

	_, err = lazarus.Open(lazarus.Options{Dir: dir, Model: model1})
	require.ErrorIs(t, err, pebblejournal.ErrLocked)

	require.NoError(t, rt1.Close())
	_, err = rt1.Send(ctx, "mid", "after close", user)
	require.ErrorIs(t, err, lazarus.ErrClosed)
	_, err = rt1.History(ctx, "mid", 0, 0)
	require.ErrorIs(t, err, lazarus.ErrClosed)

	var failedCalls atomic.Int32
	model2 := agent.ModelFunc(func(ctx context.Context, turn agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
		if turn.ConversationID == "failed" {
			failedCalls.Add(1)
		}
		return agent.Text("resumed"), nil
	})
	rt2, err := lazarus.Open(lazarus.Options{Dir: dir, Model: model2})
	require.NoError(t, err)
	defer rt2.Close()
	ch, err = rt2.Subscribe(ctx, "mid", seq)
	require.NoError(t, err)
	var answered *messages.Event
	for u := range ch {
		if a := u.Event.GetAssistantMsg(); a != nil {
			answered = u.Event
			break
		}
	}
	require.NotNil(t, answered, "the turn left mid-way is resumed on Open")
	require.Contains(t, answered.GetAssistantMsg().String(), "resumed")
	require.EqualValues(t, 0, failedCalls.Load(), "a failed turn is not resumed")

	_, err = rt2.Edit(ctx, "agents", critSeq, "review that", user)
	require.ErrorIs(t, err, lazarus.ErrUnknownAgent)
	require.ErrorIs(t, err, journal.ErrInvalid)
	_, err = rt2.SubscribeWith(ctx, "agents", 0, lazarus.SubscribeOptions{Agent: lazarus.ViewOf("critic")})
	require.ErrorIs(t, err, lazarus.ErrUnknownAgent, "a name the log holds but Options.Agents does not")
}

// TestReadmeModelsRetryLayers checks the "Models" section's two retry
// layers: against a server that always answers 500, a provider retrying 4
// times under a runtime retrying 3 times makes 12 requests, the turn fails
// with a *lazarus.TurnError of 3 attempts that errors.Is
// agent.ErrUnavailable, and nothing of the calls is written (the log holds
// the message and the turn_failed event).
func TestReadmeModelsRetryLayers(t *testing.T) {
	ctx := ctxT(t)
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"error":{"message":"down","type":"server_error","param":null,"code":null}}`))
	}))
	t.Cleanup(srv.Close)
	m, err := openai.New(openai.Options{Model: "gpt-4o-mini", BaseURL: srv.URL, APIKey: "test-key",
		Retry: retry.Policy{MaxAttempts: 4, InitialBackoff: time.Millisecond, MaxBackoff: time.Millisecond}})
	require.NoError(t, err)
	rt, err := lazarus.Open(lazarus.Options{Model: m,
		ModelRetry: lazarus.RetryPolicy{MaximumAttempts: 3, InitialInterval: time.Millisecond, MaximumInterval: time.Millisecond}})
	require.NoError(t, err)
	defer rt.Close()

	end, err := rt.SendAndWait(ctx, "c", "hello", user)
	require.ErrorIs(t, err, lazarus.ErrTurnFailed)
	require.Equal(t, lazarus.TurnFailed, end.Outcome)
	require.ErrorIs(t, end.Err, agent.ErrUnavailable)
	var te *lazarus.TurnError
	require.ErrorAs(t, end.Err, &te)
	require.Equal(t, 3, te.Attempts)
	require.EqualValues(t, 12, requests.Load(), "MaximumAttempts times the provider's attempts")
	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, 2)
	require.NotNil(t, evs[0].GetUserMsg())
	require.NotNil(t, evs[1].GetTurnFailed())
}

// TestReadmeUseLogsNothingWithoutALogger: without Options.Logger the
// library logs nothing, neither through log/slog's default logger nor the
// standard log package, on a Pebble directory, through a panicking model,
// a failing server tool, a Kill, a Wake and a Close.
func TestReadmeUseLogsNothingWithoutALogger(t *testing.T) {
	var mu sync.Mutex
	var logged bytes.Buffer
	w := writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logged.Write(p)
	})
	prevSlog := slog.Default()
	prevOut, prevFlags := log.Writer(), log.Flags()
	slog.SetDefault(slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})))
	log.SetOutput(w)
	t.Cleanup(func() {
		slog.SetDefault(prevSlog)
		log.SetOutput(prevOut)
		log.SetFlags(prevFlags)
	})

	ctx := ctxT(t)
	model := agent.ModelFunc(func(ctx context.Context, turn agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
		last := turn.Context[len(turn.Context)-1]
		switch {
		case last.GetUserMsg() != nil && turn.ConversationID == "p":
			panic("boom")
		case last.GetUserMsg() != nil:
			return agent.Reply("", agent.Call("fail", `{}`)), nil
		}
		return agent.Text("done"), nil
	})
	rt, err := lazarus.Open(lazarus.Options{Dir: t.TempDir(), Model: model, Tools: []agent.Tool{{
		Name: "fail", Executor: messages.Executor_EXECUTOR_SERVER,
		Run: func(context.Context, agent.Invocation) (string, error) { return "", errors.New("tool down") },
	}}})
	require.NoError(t, err)
	_, err = rt.SendAndWait(ctx, "p", "hello", user)
	require.ErrorIs(t, err, agent.ErrPanicked)
	end, err := rt.SendAndWait(ctx, "t", "hello", user)
	require.NoError(t, err)
	require.Equal(t, "done", end.Text)
	rt.Kill("t")
	require.NoError(t, rt.Wake(ctx, "t"))
	require.NoError(t, rt.Close())

	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, logged.String(), "logged without Options.Logger")
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestReadmeModelsMaxTokensStopIsAnAnswer: a stop at the max tokens bound
// (finish_reason "length") is an answer, not a failure: what the model
// wrote is kept, the tool call cut at the bound gets an "invalid" error
// result, and the model reads it on its next call, which answers.
func TestReadmeModelsMaxTokensStopIsAnAnswer(t *testing.T) {
	ctx := ctxT(t)
	cut, err := os.ReadFile("../agent/openai/testdata/tool_call.txt")
	require.NoError(t, err)
	// The tool call's arguments end after `{"city":`, at the bound.
	lines := strings.Split(string(cut), "\n")
	var kept []string
	for _, l := range lines {
		if strings.Contains(l, `\"Paris\"}`) {
			continue
		}
		kept = append(kept, strings.Replace(l, `"finish_reason": "tool_calls"`, `"finish_reason": "length"`, 1))
	}
	text, err := os.ReadFile("../agent/openai/testdata/text.txt")
	require.NoError(t, err)
	responses, err := providertest.Parse([]byte(strings.Join(kept, "\n") + "\n===\n" + string(text)))
	require.NoError(t, err)
	srv := providertest.Serve(t, responses)
	m, err := openai.New(openai.Options{Model: "gpt-4o-mini", BaseURL: srv.URL, APIKey: "test-key"})
	require.NoError(t, err)
	rt, err := lazarus.Open(lazarus.Options{Model: m, Tools: []agent.Tool{{
		Name: "get_weather", Executor: messages.Executor_EXECUTOR_SERVER,
		Run: func(context.Context, agent.Invocation) (string, error) {
			t.Error("the cut call ran")
			return "", nil
		},
	}}})
	require.NoError(t, err)
	defer rt.Close()

	end, err := rt.SendAndWait(ctx, "c", "weather in Paris?", user)
	require.NoError(t, err)
	require.Equal(t, lazarus.TurnAnswered, end.Outcome)
	require.Equal(t, "Hello, world!", end.Text)
	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, 5, "message, cut answer, its call, the call's result, answer")
	require.Contains(t, evs[1].GetAssistantMsg().String(), "Let me check.")
	require.Len(t, evs[1].GetAssistantMsg().GetToolCalls(), 1)
	require.Equal(t, "invalid", evs[3].GetToolResult().GetOutcome().GetError().GetCode())
	require.Len(t, srv.Requests(), 2)
}

// TestReadmeUseDeleteRacingSends: sends racing a Delete of a live
// conversation each land before it or fail with journal.ErrDeleted, a
// subscription ends with an update wrapping journal.ErrDeleted, and every
// later call naming it (Send, Wake, History, Subscribe) returns
// journal.ErrDeleted.
func TestReadmeUseDeleteRacingSends(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), nil)
	ctx := ctxT(t)
	_, err := h.rt.SendAndWait(ctx, "c", "hello", user)
	require.NoError(t, err)
	sub, err := h.rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)

	const n = 8
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = h.rt.Send(ctx, "c", "racing", user)
		}()
	}
	close(start)
	require.NoError(t, h.rt.Delete(ctx, "c"))
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			require.ErrorIs(t, err, journal.ErrDeleted, "send %d", i)
		}
	}
	var last lazarus.Update
	for u := range sub {
		last = u
	}
	require.ErrorIs(t, last.Err, journal.ErrDeleted, "the subscription's last update")

	_, err = h.rt.Send(ctx, "c", "after", user)
	require.ErrorIs(t, err, journal.ErrDeleted)
	require.ErrorIs(t, h.rt.Wake(ctx, "c"), journal.ErrDeleted)
	_, err = h.rt.History(ctx, "c", 0, 0)
	require.ErrorIs(t, err, journal.ErrDeleted)
	_, err = h.rt.Subscribe(ctx, "c", 0)
	require.ErrorIs(t, err, journal.ErrDeleted)
}

// TestReadmeSettingsReachTheProviderAfterARestart: Options.Settings are
// every conversation's defaults, Configure sets a conversation's own before
// its first message, durably, so after a restart the OpenAI provider's
// request carries them over its own options (the conversation's system
// prompt and model name, the defaults' max tokens).
func TestReadmeSettingsReachTheProviderAfterARestart(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	body, err := os.ReadFile("../agent/openai/testdata/text.txt")
	require.NoError(t, err)
	responses, err := providertest.Parse(body)
	require.NoError(t, err)
	srv := providertest.Serve(t, responses)
	m, err := openai.New(openai.Options{Model: "gpt-4o-mini", BaseURL: srv.URL, APIKey: "test-key", System: "provider prompt"})
	require.NoError(t, err)
	defaults := agent.Settings{SystemPrompt: "default prompt", MaxTokens: 321}

	rt1, err := lazarus.Open(lazarus.Options{Dir: dir, Model: m, Settings: defaults})
	require.NoError(t, err)
	require.NoError(t, rt1.Configure(ctx, "c", agent.Settings{SystemPrompt: "be brief", Model: "gpt-4.1-nano"}))
	require.NoError(t, rt1.Close())

	rt2, err := lazarus.Open(lazarus.Options{Dir: dir, Model: m, Settings: defaults})
	require.NoError(t, err)
	defer rt2.Close()
	end, err := rt2.SendAndWait(ctx, "c", "hello", user)
	require.NoError(t, err)
	require.Equal(t, "Hello, world!", end.Text)
	reqs := srv.Requests()
	require.Len(t, reqs, 1)
	var req struct {
		Model     string `json:"model"`
		MaxTokens int64  `json:"max_completion_tokens"`
		Messages  []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(reqs[0], &req), "%s", reqs[0])
	require.Equal(t, "gpt-4.1-nano", req.Model)
	require.NotEmpty(t, req.Messages)
	require.Equal(t, "system", req.Messages[0].Role)
	require.Contains(t, fmt.Sprint(req.Messages[0].Content), "be brief")
	require.NotContains(t, string(reqs[0]), "provider prompt")
	require.NotContains(t, string(reqs[0]), "default prompt")
	require.EqualValues(t, 321, req.MaxTokens, "the defaults' max tokens")
}
