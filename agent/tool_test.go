package agent_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	server = messages.Executor_EXECUTOR_SERVER
	human  = messages.Executor_EXECUTOR_HUMAN
)

func ok(content string) agent.ServerFunc {
	return func(context.Context, agent.Invocation) (string, error) { return content, nil }
}

func TestNewRegistryRejects(t *testing.T) {
	valid := agent.Tool{Name: "lookup", Executor: server, Run: ok(`{}`)}
	cases := []struct {
		name  string
		tools []agent.Tool
		want  string // a fragment of the error naming the problem
	}{
		{"empty name", []agent.Tool{{Executor: server, Run: ok(`{}`)}}, "empty tool name"},
		{"name with a space", []agent.Tool{{Name: "look up", Executor: server, Run: ok(`{}`)}}, "has byte ' '"},
		{"name with a dot", []agent.Tool{{Name: "a.b", Executor: server, Run: ok(`{}`)}}, "has byte '.'"},
		{"name too long", []agent.Tool{{Name: strings.Repeat("x", agent.MaxNameBytes+1), Executor: server, Run: ok(`{}`)}}, "exceeds 64"},
		{"duplicate name", []agent.Tool{valid, {Name: "lookup", Executor: human}}, `duplicate tool name "lookup"`},
		{"server tool without Run", []agent.Tool{{Name: "x", Executor: server}}, "has no Run"},
		{"human tool with Run", []agent.Tool{{Name: "x", Executor: human, Run: ok(`{}`)}}, "has a Run"},
		{"human tool with RunTimeout", []agent.Tool{{Name: "x", Executor: human, RunTimeout: time.Minute}}, "only server tools"},
		{"unspecified executor", []agent.Tool{{Name: "x", Run: ok(`{}`)}}, "executor EXECUTOR_UNSPECIFIED"},
		{"unknown executor", []agent.Tool{{Name: "x", Executor: messages.Executor(9), Run: ok(`{}`)}}, "executor 9"},
		{"server tool with Prompt", []agent.Tool{{Name: "x", Executor: server, Run: ok(`{}`), Prompt: func(string) string { return "" }}}, "only human tools"},
		{"server tool with Timeout", []agent.Tool{{Name: "x", Executor: server, Run: ok(`{}`), Timeout: time.Minute}}, "only human tools"},
		{"server tool with Deadline", []agent.Tool{{Name: "x", Executor: server, Run: ok(`{}`),
			Deadline: func(string, time.Time) time.Time { return time.Time{} }}}, "only human tools"},
		{"parameters not JSON", []agent.Tool{{Name: "x", Executor: human, Parameters: `{"type":`}}, "not valid JSON"},
		{"parameters an array", []agent.Tool{{Name: "x", Executor: human, Parameters: `[]`}}, "an array, not a JSON object"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := agent.NewRegistry(tc.tools...)
			require.ErrorIs(t, err, journal.ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
			assert.Nil(t, r)
		})
	}
}

func TestNewRegistryAccepts(t *testing.T) {
	r, err := agent.NewRegistry(
		agent.Tool{Name: "zeta-tool", Executor: human, Parameters: ` {"type":"object"}`},
		agent.Tool{Name: "Alpha_1", Description: "first", Executor: server, Run: ok(`1`), Parameters: `{}`},
	)
	require.NoError(t, err)
	specs := r.Specs()
	assert.Equal(t, []agent.ToolSpec{
		{Name: "Alpha_1", Description: "first", Executor: server, Parameters: `{}`},
		{Name: "zeta-tool", Executor: human, Parameters: ` {"type":"object"}`},
	}, specs, "sorted by name")
	specs[0].Name = "changed"
	assert.Equal(t, "Alpha_1", r.Specs()[0].Name, "Specs returns the caller's copy")

	empty, err := agent.NewRegistry()
	require.NoError(t, err)
	assert.Empty(t, empty.Specs())
}

func TestLookupFillsHumanDefaults(t *testing.T) {
	r, err := agent.NewRegistry(
		agent.Tool{Name: "approve", Executor: human},
		agent.Tool{Name: "sign", Executor: human, Timeout: time.Minute, Prompt: func(args string) string { return "Sign " + args + "?" }},
		agent.Tool{Name: "forever", Executor: human, Timeout: -1},
		agent.Tool{Name: "broken", Executor: human, Prompt: func(string) string { panic("boom") }},
		agent.Tool{Name: "calc", Executor: server, Run: ok(`1`)},
	)
	require.NoError(t, err)
	cases := []struct {
		name        string
		tool        string
		wantTimeout time.Duration
		wantPrompt  string
	}{
		{"default timeout and prompt", "approve", agent.DefaultHumanTimeout, `approve {"x":1}`},
		{"own timeout and prompt", "sign", time.Minute, `Sign {"x":1}?`},
		{"negative timeout means never", "forever", -1, `forever {"x":1}`},
		{"panicking prompt gives the default", "broken", agent.DefaultHumanTimeout, `broken {"x":1}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tool, found := r.Lookup(tc.tool)
			require.True(t, found)
			assert.Equal(t, tc.wantTimeout, tool.Timeout)
			require.NotNil(t, tool.Prompt)
			assert.Equal(t, tc.wantPrompt, tool.Prompt(`{"x":1}`))
		})
	}
	t.Run("a prompt is made valid UTF-8 and cut to MaxPromptBytes", func(t *testing.T) {
		r, err := agent.NewRegistry(
			agent.Tool{Name: "cut", Executor: human, Prompt: func(string) string { return "Refund 5 " + "\u20ac"[:2] }},
			agent.Tool{Name: "long", Executor: human, Prompt: func(string) string { return strings.Repeat("\u00e9", agent.MaxPromptBytes) }},
			agent.Tool{Name: "plain", Executor: human},
		)
		require.NoError(t, err)
		cut, _ := r.Lookup("cut")
		assert.Equal(t, "Refund 5 \uFFFD", cut.Prompt("{}"))
		long, _ := r.Lookup("long")
		p := long.Prompt("{}")
		assert.LessOrEqual(t, len(p), agent.MaxPromptBytes)
		assert.True(t, utf8.ValidString(p))
		assert.True(t, strings.HasSuffix(p, "..."))
		plain, _ := r.Lookup("plain")
		big := `{"a":"` + strings.Repeat("x", 2*agent.MaxPromptBytes) + `"}`
		p = plain.Prompt(big)
		assert.Len(t, p, agent.MaxPromptBytes, "the default prompt is cut too")
		assert.True(t, strings.HasPrefix(p, `plain {"a":"xxx`))
	})
	t.Run("server tool keeps zero timeout and no prompt", func(t *testing.T) {
		tool, found := r.Lookup("calc")
		require.True(t, found)
		assert.Zero(t, tool.Timeout)
		assert.Nil(t, tool.Prompt)
	})
	t.Run("unknown", func(t *testing.T) {
		_, found := r.Lookup("nope")
		assert.False(t, found)
	})
	t.Run("nil registry has no tools", func(t *testing.T) {
		var nilReg *agent.Registry
		_, found := nilReg.Lookup("approve")
		assert.False(t, found)
		assert.Empty(t, nilReg.Specs())
		require.ErrorIs(t, nilReg.CheckCall("approve", `{}`), journal.ErrInvalid)
	})
}

func TestWithDefaultTimeout(t *testing.T) {
	r, err := agent.NewRegistry(
		agent.Tool{Name: "approve", Executor: human},
		agent.Tool{Name: "sign", Executor: human, Timeout: time.Minute},
	)
	require.NoError(t, err)
	cases := []struct {
		name         string
		d            time.Duration
		wantApprove  time.Duration
		wantUnchange time.Duration
	}{
		{"positive", time.Hour, time.Hour, time.Minute},
		{"negative means never", -1, -1, time.Minute},
		{"zero means the package default", 0, agent.DefaultHumanTimeout, time.Minute},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r2 := r.WithDefaultTimeout(tc.d)
			a, _ := r2.Lookup("approve")
			s, _ := r2.Lookup("sign")
			assert.Equal(t, tc.wantApprove, a.Timeout)
			assert.Equal(t, tc.wantUnchange, s.Timeout, "a tool's own Timeout wins")
			orig, _ := r.Lookup("approve")
			assert.Equal(t, agent.DefaultHumanTimeout, orig.Timeout, "the original registry is unchanged")
		})
	}
}

func TestCheckCall(t *testing.T) {
	r, err := agent.NewRegistry(agent.Tool{Name: "lookup", Executor: server, Run: ok(`{}`)})
	require.NoError(t, err)
	cases := []struct {
		name, tool, args string
		want             string // "" means valid
	}{
		{"valid", "lookup", `{"q":"x"}`, ""},
		{"valid with spaces", "lookup", " \n{} ", ""},
		{"unknown tool", "delete_all", `{}`, `unknown tool "delete_all"`},
		{"empty arguments", "lookup", ``, "not valid JSON"},
		{"arguments not JSON", "lookup", `{"q":`, "not valid JSON"},
		{"arguments invalid UTF-8", "lookup", "{\"q\":\"\xff\"}", "not valid JSON"},
		{"arguments an array", "lookup", `[1]`, "an array, not a JSON object"},
		{"arguments a string", "lookup", `"x"`, "a string, not a JSON object"},
		{"arguments a number", "lookup", `12`, "a number, not a JSON object"},
		{"arguments null", "lookup", `null`, "null, not a JSON object"},
		{"arguments a boolean", "lookup", `true`, "a boolean, not a JSON object"},
		{"two values", "lookup", `{} {}`, "not valid JSON"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := r.CheckCall(tc.tool, tc.args)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, journal.ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func outcomeError(t *testing.T, o *messages.ToolOutcome) *messages.ToolError {
	t.Helper()
	require.NotNil(t, o)
	e := o.GetError()
	require.NotNil(t, e, "want an error outcome, got %v", o)
	return e
}

func TestRunServer(t *testing.T) {
	user := agent.Scope{UserID: "u1"}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	var ran []string
	record := func(name string, f agent.ServerFunc) agent.ServerFunc {
		return func(ctx context.Context, inv agent.Invocation) (string, error) {
			ran = append(ran, name)
			return f(ctx, inv)
		}
	}
	r, err := agent.NewRegistry(
		agent.Tool{Name: "echo", Executor: server, Run: record("echo", func(_ context.Context, inv agent.Invocation) (string, error) {
			return fmt.Sprintf(`{"conv":%q,"id":%q,"args":%s,"user":%q}`, inv.ConversationID, inv.ToolCallID, inv.Arguments, inv.Scope.UserID), nil
		})},
		agent.Tool{Name: "fail", Executor: server, Run: record("fail", func(context.Context, agent.Invocation) (string, error) {
			return "", errors.New("disk full")
		})},
		agent.Tool{Name: "forbid", Executor: server, Run: record("forbid", func(context.Context, agent.Invocation) (string, error) {
			return "", fmt.Errorf("needs admin: %w", agent.ErrScope)
		})},
		agent.Tool{Name: "ownbound", Executor: server, Run: record("ownbound", func(context.Context, agent.Invocation) (string, error) {
			return "", fmt.Errorf("no answer within 3s: %w: %w", agent.ErrToolTimeout, context.DeadlineExceeded)
		})},
		agent.Tool{Name: "explode", Executor: server, Run: record("explode", func(context.Context, agent.Invocation) (string, error) {
			panic("kaboom")
		})},
		agent.Tool{Name: "private", Executor: server, RequiresUser: true, Run: record("private", ok(`"secret"`))},
		agent.Tool{Name: "waits", Executor: server, Run: record("waits", func(ctx context.Context, _ agent.Invocation) (string, error) {
			<-ctx.Done()
			return "", ctx.Err()
		})},
		agent.Tool{Name: "plain", Executor: server, Run: record("plain", ok("hello\nworld"))},
		agent.Tool{Name: "badutf8", Executor: server, Run: record("badutf8", ok("a\xffb"))},
		agent.Tool{Name: "empty", Executor: server, Run: record("empty", ok(""))},
		agent.Tool{Name: "huge", Executor: server, Run: record("huge", ok(`"`+strings.Repeat("x", agent.MaxResultBytes)+`"`))},
		agent.Tool{Name: "ask", Executor: human},
	)
	require.NoError(t, err)

	cases := []struct {
		name        string
		ctx         context.Context
		inv         agent.Invocation
		wantContent string
		wantCode    string
		wantMsg     string // fragment of the error message
		wantRan     bool
	}{
		{name: "content", inv: agent.Invocation{ConversationID: "c", ToolCallID: "t1", Name: "echo", Arguments: `{"a":1}`, Scope: user},
			wantContent: `{"conv":"c","id":"t1","args":{"a":1},"user":"u1"}`, wantRan: true},
		{name: "tool error", inv: agent.Invocation{ToolCallID: "t", Name: "fail", Scope: user}, wantCode: agent.CodeTool, wantMsg: "disk full", wantRan: true},
		{name: "tool returns ErrScope", inv: agent.Invocation{ToolCallID: "t", Name: "forbid", Scope: user}, wantCode: agent.CodeScope, wantMsg: "needs admin", wantRan: true},
		{name: "tool returns ErrToolTimeout", inv: agent.Invocation{ToolCallID: "t", Name: "ownbound", Scope: user}, wantCode: agent.CodeTimeout, wantMsg: "no answer within 3s", wantRan: true},
		{name: "panic recovered", inv: agent.Invocation{ToolCallID: "t", Name: "explode", Scope: user}, wantCode: agent.CodePanic, wantMsg: "tool explode panicked: kaboom", wantRan: true},
		{name: "requires user, system scope", inv: agent.Invocation{ToolCallID: "t", Name: "private", Scope: agent.SystemScope}, wantCode: agent.CodeScope, wantMsg: agent.ErrScope.Error()},
		{name: "requires user, empty scope", inv: agent.Invocation{ToolCallID: "t", Name: "private"}, wantCode: agent.CodeScope, wantMsg: agent.ErrScope.Error()},
		{name: "requires user, user scope", inv: agent.Invocation{ToolCallID: "t", Name: "private", Scope: user}, wantContent: `"secret"`, wantRan: true},
		{name: "system scope without RequiresUser", inv: agent.Invocation{ToolCallID: "t", Name: "echo", Arguments: `{}`, Scope: agent.SystemScope},
			wantContent: `{"conv":"","id":"t","args":{},"user":"system"}`, wantRan: true},
		{name: "unknown tool", inv: agent.Invocation{ToolCallID: "t", Name: "nope", Scope: user}, wantCode: agent.CodeInvalid, wantMsg: `unknown tool "nope"`},
		{name: "human tool", inv: agent.Invocation{ToolCallID: "t", Name: "ask", Scope: user}, wantCode: agent.CodeInvalid, wantMsg: "not a server tool"},
		{name: "no tool call id", inv: agent.Invocation{Name: "echo", Scope: user}, wantCode: agent.CodeInvalid, wantMsg: "no tool call id"},
		{name: "canceled", ctx: canceled, inv: agent.Invocation{ToolCallID: "t", Name: "waits", Scope: user}, wantCode: agent.CodeCanceled, wantMsg: "context canceled", wantRan: true},
		{name: "canceled but succeeded", ctx: canceled, inv: agent.Invocation{ToolCallID: "t", Name: "private", Scope: user}, wantContent: `"secret"`, wantRan: true},
		{name: "plain text becomes a JSON string", inv: agent.Invocation{ToolCallID: "t", Name: "plain", Scope: user}, wantContent: `"hello\nworld"`, wantRan: true},
		{name: "invalid UTF-8 becomes a JSON string", inv: agent.Invocation{ToolCallID: "t", Name: "badutf8", Scope: user}, wantContent: `"a\ufffdb"`, wantRan: true},
		{name: "empty content becomes an empty JSON string", inv: agent.Invocation{ToolCallID: "t", Name: "empty", Scope: user}, wantContent: `""`, wantRan: true},
		{name: "too large", inv: agent.Invocation{ToolCallID: "t", Name: "huge", Scope: user}, wantCode: agent.CodeTooLarge, wantMsg: "exceeds", wantRan: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ran = nil
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			out := r.RunServer(ctx, tc.inv)
			require.NotNil(t, out)
			if tc.wantRan {
				assert.Equal(t, []string{tc.inv.Name}, ran)
			} else {
				assert.Empty(t, ran, "the tool must not run")
			}
			if tc.wantCode == "" {
				require.Nil(t, out.GetError(), "unexpected error outcome")
				assert.Equal(t, tc.wantContent, out.GetContent())
				return
			}
			e := outcomeError(t, out)
			assert.Equal(t, tc.wantCode, e.GetCode())
			assert.Contains(t, e.GetMessage(), tc.wantMsg)
		})
	}
}

func TestErrorOutcome(t *testing.T) {
	cases := []struct {
		name, msg, want string
	}{
		{"short", "no", "no"},
		{"invalid UTF-8 replaced", "a\xffb", "a\uFFFDb"},
		{"long is cut", strings.Repeat("é", agent.MaxErrorBytes), strings.Repeat("é", (agent.MaxErrorBytes-3)/2) + "..."},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := outcomeError(t, agent.ErrorOutcome(agent.CodeExpired, tc.msg))
			assert.Equal(t, agent.CodeExpired, e.GetCode())
			assert.Equal(t, tc.want, e.GetMessage())
			assert.True(t, utf8.ValidString(e.GetMessage()))
			assert.LessOrEqual(t, len(e.GetMessage()), agent.MaxErrorBytes)
		})
	}
}

func TestScope(t *testing.T) {
	cases := []struct {
		name             string
		s                agent.Scope
		isSystem, isUser bool
	}{
		{"system scope", agent.SystemScope, true, false},
		{"system user id with extras", agent.Scope{UserID: agent.SystemUserID, Permissions: []string{"admin"}}, true, false},
		{"empty scope", agent.Scope{}, false, false},
		{"user", agent.Scope{UserID: "alice"}, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.isSystem, tc.s.IsSystem())
			assert.Equal(t, tc.isUser, tc.s.IsUser())
		})
	}
	s := agent.Scope{UserID: "alice", Permissions: []string{"read", "write"}}
	assert.True(t, s.Has("write"))
	assert.False(t, s.Has("admin"))
}

func TestModelFunc(t *testing.T) {
	var got agent.Turn
	m := agent.ModelFunc(func(_ context.Context, turn agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
		got = turn
		onDelta("hi")
		return &messages.AssistantMessage{Model: "f"}, nil
	})
	var deltas []string
	msg, err := m.Generate(context.Background(), agent.Turn{ConversationID: "c"}, func(s string) { deltas = append(deltas, s) })
	require.NoError(t, err)
	assert.Equal(t, "f", msg.GetModel())
	assert.Equal(t, "c", got.ConversationID)
	assert.Equal(t, []string{"hi"}, deltas)
}

func TestCallDeadline(t *testing.T) {
	now := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	meeting := time.Date(2026, 11, 3, 17, 30, 0, 0, time.UTC)
	fromArgs := func(args string, got time.Time) time.Time {
		if got != now {
			panic("Deadline was not given the suspension time")
		}
		if strings.Contains(args, "meeting") {
			return meeting
		}
		return time.Time{}
	}
	cases := []struct {
		name string
		tool agent.Tool
		args string
		want time.Time // zero: never
	}{
		{"Timeout", agent.Tool{Timeout: time.Hour}, `{}`, now.Add(time.Hour)},
		{"negative Timeout: never", agent.Tool{Timeout: -1}, `{}`, time.Time{}},
		{"zero Timeout of a bare Tool: the package default", agent.Tool{}, `{}`, now.Add(agent.DefaultHumanTimeout)},
		{"Deadline from the arguments", agent.Tool{Timeout: time.Hour, Deadline: fromArgs}, `{"until":"meeting"}`, meeting},
		{"Deadline zero: the Timeout rule", agent.Tool{Timeout: time.Hour, Deadline: fromArgs}, `{}`, now.Add(time.Hour)},
		{"Deadline zero with a negative Timeout: never", agent.Tool{Timeout: -1, Deadline: fromArgs}, `{}`, time.Time{}},
		{"Deadline wins over a negative Timeout", agent.Tool{Timeout: -1, Deadline: fromArgs}, `{"until":"meeting"}`, meeting},
		{"Deadline in the past is kept (expires at once)", agent.Tool{Timeout: time.Hour,
			Deadline: func(string, time.Time) time.Time { return now.Add(-time.Minute) }}, `{}`, now.Add(-time.Minute)},
		{"Deadline panics: the Timeout rule", agent.Tool{Timeout: time.Hour,
			Deadline: func(string, time.Time) time.Time { panic("boom") }}, `{}`, now.Add(time.Hour)},
		{"Deadline beyond year 9999: the Timeout rule", agent.Tool{Timeout: time.Hour,
			Deadline: func(string, time.Time) time.Time { return time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }}, `{}`, now.Add(time.Hour)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.tool.Name, tc.tool.Executor = "book", human
			got := tc.tool.CallDeadline(tc.args, now)
			assert.True(t, tc.want.Equal(got), "want %v, got %v", tc.want, got)
			assert.Equal(t, tc.want.IsZero(), got.IsZero())
		})
	}
	// Through a Registry: Lookup fills Timeout with the Registry's default
	// and keeps Deadline.
	r, err := agent.NewRegistry(agent.Tool{Name: "book", Executor: human, Deadline: fromArgs})
	require.NoError(t, err)
	tool, found := r.WithDefaultTimeout(2 * time.Hour).Lookup("book")
	require.True(t, found)
	assert.Equal(t, meeting, tool.CallDeadline(`{"until":"meeting"}`, now))
	assert.Equal(t, now.Add(2*time.Hour), tool.CallDeadline(`{}`, now))
}

// nilErr is an error type whose Error reads a field, so a typed nil
// (*nilErr)(nil), a common mistake of a tool, panics when asked its text.
type nilErr struct{ msg string }

func (e *nilErr) Error() string { return e.msg }

// RunServer never panics, even on the error a tool returns: a typed nil
// error, whose Error method panics, becomes an error outcome (CodePanic,
// or CodeCanceled once ctx is done), not a panic of the runtime's
// goroutine.
func TestRunServerSurvivesAnErrorWhoseErrorPanics(t *testing.T) {
	r, err := agent.NewRegistry(agent.Tool{Name: "typednil", Executor: server, Run: func(context.Context, agent.Invocation) (string, error) {
		var e *nilErr
		return "", e
	}})
	require.NoError(t, err)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		code string
	}{
		{"live", context.Background(), agent.CodePanic},
		{"canceled", canceled, agent.CodeCanceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out *messages.ToolOutcome
			require.NotPanics(t, func() {
				out = r.RunServer(tc.ctx, agent.Invocation{ToolCallID: "t", Name: "typednil", Scope: agent.Scope{UserID: "u"}})
			})
			e := outcomeError(t, out)
			assert.Equal(t, tc.code, e.GetCode())
			assert.Contains(t, e.GetMessage(), "typednil")
			assert.True(t, utf8.ValidString(e.GetMessage()))
		})
	}
}
