package render_test

// Black-box tests of the package's godoc: each test names the promise it
// checks, and uses only the exported API.

import (
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/render"
)

// hostile holds a line break, a carriage return, the line separator, NEL,
// an ANSI escape, a bidirectional override, invalid UTF-8 and a quote.
const hostile = "a\nb\rc\u2028d\u0085e\x1b[31mf\u202eg\xffh\"i j\\"

func requireOneVisibleLine(t *testing.T, line string) {
	t.Helper()
	require.True(t, utf8.ValidString(line), "%q", line)
	for _, r := range line {
		require.True(t, r == ' ' || unicode.IsPrint(r), "%U in %q", r, line)
	}
}

// Every piece of user or model text is quoted, so a rendering never spans
// lines: every text and id field of every event type, and every update.
func TestBBHostileTextStaysOneLine(t *testing.T) {
	id := &messages.Identity{UserId: hostile, Roles: []string{hostile, ""}}
	blob := &messages.Blob{Name: hostile, MediaType: hostile, Uri: hostile, Data: []byte{1}}
	events := []*messages.Event{
		nil,
		{},
		{Author: id, Body: &messages.Event_UserMsg{UserMsg: agent.UserMessage(agent.TextPart(hostile),
			&messages.ContentPart{Part: &messages.ContentPart_Image{Image: blob}},
			&messages.ContentPart{Part: &messages.ContentPart_File{File: blob}})}},
		{Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{
			Content: []*messages.ContentPart{agent.TextPart(hostile)}, Model: hostile,
			ToolCalls: []*messages.ToolCall{{Id: hostile, Name: hostile, Arguments: hostile}}}}},
		{Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{}}},
		{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: &messages.ToolCall{Id: hostile, Name: hostile, Arguments: hostile}}}},
		{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{}}},
		{Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{Name: hostile, ToolCallId: hostile,
			Outcome: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: hostile}}}}},
		{Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{Outcome: agent.ErrorOutcome(hostile, hostile)}}},
		{Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{}}},
		{Body: &messages.Event_Suspension{Suspension: &messages.Suspension{Pending: []*messages.PendingCall{
			{ToolCallId: hostile, Kind: hostile, Prompt: hostile}, nil}}}},
		{Body: &messages.Event_Resolution{Resolution: &messages.Resolution{ToolCallId: hostile, By: hostile}}},
		{Body: &messages.Event_Resolution{Resolution: &messages.Resolution{ToolCallId: hostile, Resolver: id}}},
		{Body: &messages.Event_Rewind{Rewind: &messages.Rewind{Reason: hostile}}},
		{Body: &messages.Event_TurnFailed{TurnFailed: &messages.TurnFailed{Code: hostile, Message: hostile}}},
		{Body: &messages.Event_Handoff{Handoff: &messages.Handoff{From: hostile, To: hostile, Message: hostile, ToolCallId: hostile}}},
		{Time: &timestamppb.Timestamp{Seconds: 1 << 62}, Body: &messages.Event_Rewind{Rewind: &messages.Rewind{}}},
	}
	for _, ev := range events {
		for _, full := range []bool{false, true} {
			requireOneVisibleLine(t, render.Event(ev, full))
			requireOneVisibleLine(t, render.EventDetail(ev, full))
			requireOneVisibleLine(t, render.EventType(ev))
			requireOneVisibleLine(t, render.Update(actors.Update{Event: ev}, full))
		}
	}
	updates := []actors.Update{
		{},
		{Delta: hostile, Restart: true},
		{Err: errors.New(hostile), Retry: &actors.Retry{Attempt: -1, Delay: -1}},
		{TurnEnd: &actors.TurnEnd{Err: errors.New(hostile)}},
	}
	for _, u := range updates {
		for _, full := range []bool{false, true} {
			requireOneVisibleLine(t, render.Update(u, full))
		}
	}
	requireOneVisibleLine(t, render.Identity(id))
	requireOneVisibleLine(t, render.Quote(hostile, true))
}

// ID: a plain id as is, anything else quoted, so it stays one visible
// token; the empty id is shown as "".
func TestBBID(t *testing.T) {
	assert.Equal(t, "tc_1-a", render.ID("tc_1-a"))
	for _, id := range []string{"", "a b", `a"b`, "a\nb", "\xff", "a\tb", "a\u00a0b", "a\u200bb"} {
		got := render.ID(id)
		assert.True(t, strings.HasPrefix(got, `"`), "%q -> %q", id, got)
		requireOneVisibleLine(t, got)
	}
}

// Quote: clipped to ClipRunes runes (not bytes) unless full, marked with
// "...".
func TestBBQuoteClipsRunes(t *testing.T) {
	exact := strings.Repeat("é", render.ClipRunes)
	assert.Equal(t, `"`+exact+`"`, render.Quote(exact, false))
	long := exact + "é"
	assert.Equal(t, `"`+exact+`..."`, render.Quote(long, false))
	assert.Equal(t, `"`+long+`"`, render.Quote(long, true))
	assert.Equal(t, `""`, render.Quote("", false))
}

// Identity: "anonymous" for an empty user id, also for nil; roles in
// brackets.
func TestBBIdentityNil(t *testing.T) {
	assert.Equal(t, "anonymous", render.Identity(nil))
	assert.Equal(t, "anonymous", render.Identity(&messages.Identity{}))
	assert.Equal(t, "bob[approver,oncall]", render.Identity(&messages.Identity{UserId: "bob", Roles: []string{"approver", "oncall"}}))
}

// Stamp: "-" when unset; UTC to the second.
func TestBBStamp(t *testing.T) {
	assert.Equal(t, "-", render.Stamp(nil))
	assert.Equal(t, "1970-01-01T00:00:01Z", render.Stamp(&timestamppb.Timestamp{Seconds: 1, Nanos: 999999999}))
}

// Names in lower case without their prefix.
func TestBBEnumNames(t *testing.T) {
	assert.Equal(t, "suspended", render.ConversationStatus(messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED))
	assert.Equal(t, "pending", render.ToolCallStatus(messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING))
	assert.Equal(t, "human", render.Executor(messages.Executor_EXECUTOR_HUMAN))
	for _, s := range []string{render.ConversationStatus(99), render.ToolCallStatus(-1), render.Executor(1 << 20)} {
		requireOneVisibleLine(t, s)
		assert.NotEmpty(t, s)
	}
}

// EventDetail: long values are clipped unless full, a blob's URI and name
// included (an image sent as a data: URI is as long as the image).
func TestBBBlobURIIsClipped(t *testing.T) {
	uri := "data:image/png;base64," + strings.Repeat("A", 100000)
	name := strings.Repeat("n", 1000)
	ev := &messages.Event{Body: &messages.Event_UserMsg{UserMsg: agent.UserMessage(
		agent.ImagePart("image/png", nil, uri), agent.FilePart(name, "text/plain", []byte("x"), ""))}}
	short := render.EventDetail(ev, false)
	assert.Less(t, utf8.RuneCountInString(short), 4*render.ClipRunes, "%.300s", short)
	assert.Contains(t, short, "[image image/png "+uri[:render.ClipRunes]+"...]")
	assert.Contains(t, short, "[file text/plain "+name[:render.ClipRunes]+"... 1 bytes]")
	full := render.EventDetail(ev, true)
	assert.Contains(t, full, uri+"]")
	assert.Contains(t, full, name+" 1 bytes]")
}

// EventDetail: a tool name is clipped unless full (a model may call a tool
// by any name, recorded as called), its call id never (it is what resolve
// takes).
func TestBBLongToolNameIsClipped(t *testing.T) {
	name := strings.Repeat("n", 10000)
	id := strings.Repeat("i", 200)
	call := &messages.ToolCall{Id: id, Name: name, Arguments: "{}"}
	for _, ev := range []*messages.Event{
		{Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{call}}}},
		{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: call}}},
		{Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{Name: name, ToolCallId: id, Outcome: agent.ErrorOutcome("invalid", "unknown tool")}}},
	} {
		short := render.EventDetail(ev, false)
		assert.Less(t, len(short), 2*len(id)+render.ClipRunes+100, "%.300s", short)
		assert.Contains(t, short, name[:render.ClipRunes]+"...")
		assert.Contains(t, short, id)
		assert.Contains(t, render.EventDetail(ev, true), name)
	}
}
