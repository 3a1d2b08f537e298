package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
)

// pendingRow reads the fixture's pending call straight from the store.
func readCall(t *testing.T, dir, id string) *messages.ToolCallRecord {
	t.Helper()
	st, err := pebblejournal.Open(dir, pebblejournal.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()
	row, err := st.ToolCall(ctxT(t), id)
	require.NoError(t, err)
	return row
}

func TestPending(t *testing.T) {
	f := newFixture(t)
	row := readCall(t, f.dir, f.waitingCall)
	now := row.GetCreated().AsTime().Add(90 * time.Minute)

	r := cliAt(t, now, "pending", "--dir", f.dir)
	requireOK(t, r)
	lines := outLines(r.stdout)
	require.Len(t, lines, 2, r.stdout)
	require.Regexp(t, `^TOOL_CALL_ID\s+CONVERSATION\s+TOOL\s+AGE\s+DEADLINE\s+PROMPT$`, lines[0])
	require.Regexp(t, `^`+f.waitingCall+`\s+waiting\s+approve\s+1h30m0s\s+\S+Z \(overdue by 30m0s\)\s+"Approve the refund \{\\"amount\\":50\}\?"$`, lines[1])

	r = cliAt(t, row.GetCreated().AsTime().Add(time.Minute), "pending", "--dir", f.dir, "--conversation", "waiting")
	requireOK(t, r)
	require.Regexp(t, `1m0s\s+\S+Z \(in 59m0s\)`, r.stdout)

	r = cliRun(t, "", "pending", "--dir", f.dir, "--conversation", "finished")
	requireOK(t, r)
	require.Equal(t, "no human calls are waiting\n", r.stdout)

	r = cliRun(t, "", "pending", "--dir", f.dir, "--conversation", "nobody")
	require.Equal(t, exitNotFound, r.code)

	r = cliAt(t, now, "pending", "--dir", f.dir, "--json")
	requireOK(t, r)
	var doc struct {
		Pending []pendingJSON `json:"pending"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	require.Equal(t, []pendingJSON{{
		ToolCallID: f.waitingCall, ConversationID: "waiting", Tool: "approve",
		Prompt: `Approve the refund {"amount":50}?`, Args: `{"amount":50}`,
		Created: stamp(row.GetCreated()), Deadline: stamp(row.GetDeadline()), AgeSeconds: 5400,
	}}, doc.Pending)
}

// TestResolve answers the pending call at the Store level, then checks
// that a runtime opened on the directory picks the answer up: it wakes the
// conversation, records resolution and tool_result, and calls the model
// with the result.
func TestResolve(t *testing.T) {
	f := newFixture(t)

	r := cliRun(t, "", "resolve", f.waitingCall, "--dir", f.dir, "--result", `{"approved": true, "by": "ops"}`, "--as", "ops", "--roles", "approver,oncall")
	requireOK(t, r)
	require.Equal(t, "resolved "+f.waitingCall+" by ops (conversation waiting); it continues when a runtime next opens the directory\n", r.stdout)
	row := readCall(t, f.dir, f.waitingCall)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, row.GetStatus())
	require.Equal(t, "ops", row.GetResolver().GetUserId(), "the row records who answered")
	require.Equal(t, []string{"approver", "oncall"}, row.GetResolver().GetRoles())
	require.Equal(t, `{"approved": true, "by": "ops"}`, row.GetResult().GetContent())

	t.Run("a second answer is stale", func(t *testing.T) {
		r := cliRun(t, "", "resolve", f.waitingCall, "--dir", f.dir, "--result", `false`)
		require.Equal(t, exitStale, r.code)
		require.Equal(t, "stale\n", r.stdout)
		require.Contains(t, r.stderr, "is already resolved")
		require.Equal(t, `{"approved": true, "by": "ops"}`, readCall(t, f.dir, f.waitingCall).GetResult().GetContent())
	})
	t.Run("an answer to a call the runtime answered is stale", func(t *testing.T) {
		r := cliRun(t, "", "resolve", f.answeredCall, "--dir", f.dir, "--reject", "too late")
		require.Equal(t, exitStale, r.code)
		require.Equal(t, "stale\n", r.stdout)
	})
	t.Run("an unknown call is stale", func(t *testing.T) {
		r := cliRun(t, "", "resolve", "tc-nope", "--dir", f.dir, "--result", `1`)
		require.Equal(t, exitStale, r.code)
		require.Equal(t, "stale\n", r.stdout)
		require.Contains(t, r.stderr, "no tool call tc-nope")
	})

	// The next runtime resumes the conversation with the answer.
	model := scripted.New(scripted.Options{})
	model.Push("waiting", scripted.Text("Approved, refunding."))
	rt, err := lazarus.Open(lazarus.Options{Dir: f.dir, Model: model, Tools: tools(), IdleTimeout: -1})
	require.NoError(t, err)
	defer func() { require.NoError(t, rt.Close()) }()
	awaitEvent(t, rt, "waiting", func(ev *messages.Event) bool { return assistantText(ev) == "Approved, refunding." })
	turns := model.Turns("waiting")
	require.Len(t, turns, 1)
	var got []string
	for _, ev := range turns[0].Context {
		if res := ev.GetToolResult(); res.GetToolCallId() == f.waitingCall {
			got = append(got, res.GetOutcome().GetContent())
		}
	}
	require.Equal(t, []string{`{"approved": true, "by": "ops"}`}, got)
	evs, err := rt.History(ctxT(t), "waiting", 0, 0)
	require.NoError(t, err)
	require.Equal(t, "user", evs[7].GetResolution().GetBy())
	require.Equal(t, "ops", evs[7].GetResolution().GetResolver().GetUserId(), "the revived agent records who answered")
	require.Equal(t, f.waitingCall, evs[8].GetToolResult().GetToolCallId())
}

func TestResolveReject(t *testing.T) {
	f := newFixture(t)
	r := cliRun(t, "", "resolve", "--dir", f.dir, "--reject", "over the limit", f.waitingCall)
	requireOK(t, r)
	require.Contains(t, r.stdout, "errored "+f.waitingCall)
	row := readCall(t, f.dir, f.waitingCall)
	require.NotEmpty(t, row.GetResolver().GetUserId(), "without --as, the operating system's user")
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED, row.GetStatus())
	require.Equal(t, agent.ErrorOutcome(agent.CodeRejected, "over the limit").GetError().GetMessage(), row.GetResult().GetError().GetMessage())
	require.Equal(t, "rejected", row.GetResult().GetError().GetCode())
}

func TestResolveFromStdin(t *testing.T) {
	f := newFixture(t)
	r := cliRun(t, ` "ok from stdin" `+"\n", "resolve", f.waitingCall, "--dir", f.dir, "--result", "-")
	requireOK(t, r)
	require.Equal(t, `"ok from stdin"`, readCall(t, f.dir, f.waitingCall).GetResult().GetContent())
}

func TestResolveRefusesServerCalls(t *testing.T) {
	f := newFixture(t)
	st, err := pebblejournal.Open(f.dir, pebblejournal.Options{})
	require.NoError(t, err)
	evs, err := st.Events(ctxT(t), "waiting", journal.EventQuery{})
	require.NoError(t, err)
	require.NoError(t, st.Close())
	server := evs[2].GetToolCall().GetCall().GetId()

	r := cliRun(t, "", "resolve", server, "--dir", f.dir, "--result", "1")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "is a server call of lookup: the runtime runs it")

	r = cliRun(t, "", "resolve", f.waitingCall, "--dir", f.dir, "--result", `"`+strings.Repeat("x", agent.MaxResultBytes)+`"`)
	require.Equal(t, exitUsage, r.code, "a result too large for a tool_result event is refused")
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, readCall(t, f.dir, f.waitingCall).GetStatus())
}

// endConversation sets the row of conv ENDED, as an import cut short
// leaves it (with a call still pending).
func endConversation(t *testing.T, dir, conv string) {
	t.Helper()
	st, err := pebblejournal.Open(dir, pebblejournal.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()
	require.NoError(t, st.PutConversation(ctxT(t), journal.ConversationUpdate{ID: conv, Status: messages.ConversationStatus_CONVERSATION_STATUS_ENDED}))
}

func convStatus(t *testing.T, dir, conv string) messages.ConversationStatus {
	t.Helper()
	st, err := pebblejournal.Open(dir, pebblejournal.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()
	row, err := st.Conversation(ctxT(t), conv)
	require.NoError(t, err)
	return row.GetStatus()
}

// TestResolveRefusesAnEndedConversation: a call still pending in an ended
// conversation is refused, as Runtime.Resolve refuses it (ErrEnded), and
// nothing changes; the command does not say the conversation continues.
func TestResolveRefusesAnEndedConversation(t *testing.T) {
	f := newFixture(t)
	endConversation(t, f.dir, "waiting")
	r := cliRun(t, "", "resolve", f.waitingCall, "--dir", f.dir, "--result", `true`)
	require.Equal(t, exitError, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Empty(t, r.stdout, "nothing says it continues")
	require.Contains(t, r.stderr, "tool call "+f.waitingCall+": conversation waiting: "+journal.ErrEnded.Error())
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, readCall(t, f.dir, f.waitingCall).GetStatus(), "nothing is written")
	require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_ENDED, convStatus(t, f.dir, "waiting"))
}

// endsBeforeAppend is a store on which a runtime ends conversation conv
// just before the next Append: an End committed after the command's
// check.
type endsBeforeAppend struct {
	journal.Store
	conv string
}

func (s *endsBeforeAppend) Append(ctx context.Context, req *messages.AppendRequest) (journal.AppendResult, error) {
	if err := s.PutConversation(ctx, journal.ConversationUpdate{ID: s.conv, Status: messages.ConversationStatus_CONVERSATION_STATUS_ENDED}); err != nil {
		return journal.AppendResult{}, err
	}
	return s.Store.Append(ctx, req)
}

// TestResolveEndedMeanwhile: an End committed between the command's check
// and its write leaves the answer recorded and the conversation ended (as
// for Runtime.Resolve), and the command says so instead of saying that
// the conversation continues.
func TestResolveEndedMeanwhile(t *testing.T) {
	f := newFixture(t)
	var out, errb bytes.Buffer
	c := newCLI(strings.NewReader(""), &out, &errb)
	c.open = func(dir string, create bool) (journal.Store, error) {
		st, err := openPebble(dir, create)
		if err != nil {
			return nil, err
		}
		return &endsBeforeAppend{Store: st, conv: "waiting"}, nil
	}
	code := c.run(ctxT(t), []string{"resolve", f.waitingCall, "--dir", f.dir, "--result", `true`, "--as", "ops"})
	require.Equal(t, exitOK, code, "stderr: %s", errb.String())
	require.Equal(t, "resolved "+f.waitingCall+" by ops (conversation waiting); its conversation was ended meanwhile: the answer is recorded, and no turn follows\n", out.String())
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, readCall(t, f.dir, f.waitingCall).GetStatus())
	require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_ENDED, convStatus(t, f.dir, "waiting"))
}

// A result on stdin past the bound is refused as too large, not as
// "not a JSON value" (what is read of it is cut at the bound), and
// nothing changes.
func TestResolveFromStdinTooLarge(t *testing.T) {
	f := newFixture(t)
	big := `{"text":"` + strings.Repeat("x", agent.MaxResultBytes) + `"}`
	r := cliRun(t, big, "resolve", f.waitingCall, "--dir", f.dir, "--result", "-")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, fmt.Sprintf("the result on stdin exceeds %d bytes", agent.MaxResultBytes))
	require.NotContains(t, r.stderr, "not a JSON value")
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, readCall(t, f.dir, f.waitingCall).GetStatus())
}
