package render_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/render"
)

func TestEventLines(t *testing.T) {
	at := timestamppb.New(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	user := &messages.Event{Seq: 1, Time: at, Body: &messages.Event_UserMsg{UserMsg: agent.UserMessage(agent.TextPart("two\nlines"))}}
	require.Equal(t, `     1  2030-01-02T03:04:05Z  user_msg       "two\nlines"`, render.Event(user, false))

	answer := &messages.Event{Seq: 2, Body: &messages.Event_AssistantMsg{AssistantMsg: agent.Reply("ok", &messages.ToolCall{Id: "tc 1", Name: "pay"})}}
	require.Equal(t, `"ok" calls pay("tc 1")`, render.EventDetail(answer, false))
	require.Equal(t, "assistant_msg", render.EventType(answer))

	long := strings.Repeat("é", render.ClipRunes+5)
	clipped := render.EventDetail(&messages.Event{Body: &messages.Event_UserMsg{UserMsg: agent.UserMessage(agent.TextPart(long))}}, false)
	require.Equal(t, `"`+strings.Repeat("é", render.ClipRunes)+`..."`, clipped)
	require.Equal(t, `"`+long+`"`, render.EventDetail(&messages.Event{Body: &messages.Event_UserMsg{UserMsg: agent.UserMessage(agent.TextPart(long))}}, true))
	require.Equal(t, "(an event type this build does not know)", render.EventDetail(&messages.Event{}, false))
}

func TestUpdateLines(t *testing.T) {
	ev := &messages.Event{Seq: 4, Body: &messages.Event_AssistantMsg{AssistantMsg: agent.Text("done")}}
	line := render.Update(lazarus.Update{Event: ev, TurnEnd: lazarus.TurnEndOf(ev)}, false)
	require.True(t, strings.HasSuffix(line, `"done"  turn answered`), line)
	require.Equal(t, `delta "par"`, render.Update(lazarus.Update{Delta: "par"}, false))
	require.Equal(t, `restart: the deltas so far are void`, render.Update(lazarus.Update{Restart: true}, false))
	boom := errors.New("boom")
	require.Equal(t, `error "boom"  turn failed`, render.Update(lazarus.Update{Err: boom, TurnEnd: &lazarus.TurnEnd{Outcome: lazarus.TurnFailed, Err: boom}}, false))
	require.Equal(t, `turn cancelled "killed"`, render.Update(lazarus.Update{TurnEnd: &lazarus.TurnEnd{Outcome: lazarus.TurnCancelled, Err: errors.New("killed")}}, false))
	require.Equal(t, `error "busy"  retry: attempt 2 failed, next in 4s`,
		render.Update(lazarus.Update{Err: errors.New("busy"), Retry: &lazarus.Retry{Attempt: 2, Delay: 4 * time.Second}}, false))
}

func TestTurnFailedLines(t *testing.T) {
	ev := &messages.Event{Seq: 7, Body: &messages.Event_TurnFailed{TurnFailed: &messages.TurnFailed{
		Message: "model: rate limited\nagain", Code: "rate_limited", Attempts: 3}}}
	require.Equal(t, "turn_failed", render.EventType(ev))
	require.Equal(t, `rate_limited after 3 attempt(s): "model: rate limited\nagain"`, render.EventDetail(ev, false))
	// Its update says the turn failed once: the event carries the error.
	line := render.Update(lazarus.Update{Event: ev, TurnEnd: lazarus.TurnEndOf(ev)}, false)
	require.True(t, strings.HasSuffix(line, `"model: rate limited\nagain"  turn failed`), line)
}

func TestHandoffLine(t *testing.T) {
	ev := &messages.Event{Seq: 5, Agent: "critic", Body: &messages.Event_Handoff{Handoff: &messages.Handoff{
		To: "critic", Message: "check it", ToolCallId: "call_1"}}}
	require.Equal(t, "handoff", render.EventType(ev))
	require.Equal(t, `default -> critic id=call_1 "check it"`, render.EventDetail(ev, false))
}

func TestNames(t *testing.T) {
	require.Equal(t, "plain-id", render.ID("plain-id"))
	require.Equal(t, `"a b"`, render.ID("a b"))
	require.Equal(t, `""`, render.ID(""))
	require.Equal(t, "-", render.Stamp(nil))
	require.Equal(t, "suspended", render.ConversationStatus(messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED))
	require.Equal(t, "pending", render.ToolCallStatus(messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING))
	require.Equal(t, "human", render.Executor(messages.Executor_EXECUTOR_HUMAN))
}

func TestIdentities(t *testing.T) {
	alice := &messages.Identity{UserId: "alice"}
	bob := &messages.Identity{UserId: "bob", Roles: []string{"approver", "on call"}}
	msg := &messages.Event{Author: alice, Body: &messages.Event_UserMsg{UserMsg: agent.UserMessage(agent.TextPart("pay"))}}
	require.Equal(t, `"pay" from alice`, render.EventDetail(msg, false))
	res := &messages.Event{Body: &messages.Event_Resolution{Resolution: &messages.Resolution{
		ToolCallId: "tc", Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, By: "user", Resolver: bob}}}
	require.Equal(t, `id=tc resolved by bob[approver,"on call"]`, render.EventDetail(res, false))
	res.GetResolution().Resolver = nil
	require.Equal(t, `id=tc resolved by user`, render.EventDetail(res, false), "a log written before resolvers were recorded")
	require.Equal(t, "anonymous[x]", render.Identity(&messages.Identity{Roles: []string{"x"}}))
}

// TestIdentityNamesOneIdentity: ids holding the characters that list roles
// are quoted, as is a user named anonymous, so that no two identities
// render alike.
func TestIdentityNamesOneIdentity(t *testing.T) {
	cases := []struct {
		id   *messages.Identity
		want string
	}{
		{&messages.Identity{UserId: "bob[x]"}, `"bob[x]"`},
		{&messages.Identity{UserId: "bob", Roles: []string{"x"}}, `bob[x]`},
		{&messages.Identity{UserId: "bob", Roles: []string{"a,b"}}, `bob["a,b"]`},
		{&messages.Identity{UserId: "bob", Roles: []string{"a", "b"}}, `bob[a,b]`},
		{&messages.Identity{UserId: "bob", Roles: []string{"a]", "[b"}}, `bob["a]","[b"]`},
		{&messages.Identity{UserId: "a,b"}, `"a,b"`},
		{&messages.Identity{UserId: "anonymous"}, `"anonymous"`},
		{&messages.Identity{}, `anonymous`},
		{&messages.Identity{UserId: "on call", Roles: []string{"on call"}}, `"on call"["on call"]`},
	}
	seen := map[string]bool{}
	for _, tc := range cases {
		got := render.Identity(tc.id)
		require.Equal(t, tc.want, got)
		require.False(t, seen[got], "%q renders as another identity", got)
		seen[got] = true
	}
}

// TestJSONShowsNoControlCharacters: JSON arguments and results are shown
// as compact JSON, and a rune JSON allows raw inside a string but a
// terminal takes as a control (DEL, a C1 control such as CSI, NEL, the
// line separator, a bidirectional override) is shown escaped, the value
// unchanged: the line stays one line of visible text.
func TestJSONShowsNoControlCharacters(t *testing.T) {
	args := "{\"a\": \"x\u2028y\u0085z\x7f\u009b[31m\u202e\U000e0001 ok\"}"
	ev := &messages.Event{Seq: 1, Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{
		Call: &messages.ToolCall{Id: "c1", Name: "pay", Arguments: args}}}}
	for _, full := range []bool{false, true} {
		line := render.Event(ev, full)
		for _, r := range line {
			require.True(t, r == ' ' || unicode.IsPrint(r), "%U in %q", r, line)
		}
		shown := line[strings.Index(line, "args=")+len("args="):]
		var got, want any
		require.NoError(t, json.Unmarshal([]byte(shown), &got))
		require.NoError(t, json.Unmarshal([]byte(args), &want))
		require.Equal(t, want, got, "the same value")
	}
}
