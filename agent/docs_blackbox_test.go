package agent_test

// Black-box tests of the package's godoc: each test names the promise it
// checks, and uses only the exported API.

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

func okTool(name string) agent.Tool {
	return agent.Tool{Name: name, Executor: messages.Executor_EXECUTOR_SERVER,
		Run: func(context.Context, agent.Invocation) (string, error) { return `{}`, nil }}
}

// A nil *Registry is valid and has no tools.
func TestBBNilRegistry(t *testing.T) {
	var r *agent.Registry
	_, ok := r.Lookup("x")
	assert.False(t, ok)
	assert.Empty(t, r.Specs())
	require.ErrorIs(t, r.CheckCall("x", "{}"), journal.ErrInvalid)
	out := r.RunServer(context.Background(), agent.Invocation{Name: "x", ToolCallID: "c1"})
	require.NotNil(t, out)
	assert.Equal(t, agent.CodeInvalid, out.GetError().GetCode())
	r2 := r.WithDefaultTimeout(time.Hour)
	_, ok = r2.Lookup("x")
	assert.False(t, ok)
}

// Specs are sorted by name and the slice is the caller's; a Registry is
// safe for concurrent use.
func TestBBSpecsSortedAndOwned(t *testing.T) {
	r, err := agent.NewRegistry(okTool("zeta"), okTool("alpha"), okTool("mid"))
	require.NoError(t, err)
	specs := r.Specs()
	require.Len(t, specs, 3)
	assert.Equal(t, []string{"alpha", "mid", "zeta"}, []string{specs[0].Name, specs[1].Name, specs[2].Name})
	specs[0].Name = "changed"
	assert.Equal(t, "alpha", r.Specs()[0].Name)

	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				_ = r.Specs()
				_, _ = r.Lookup("mid")
				_ = r.CheckCall("mid", `{}`)
				_ = r.RunServer(context.Background(), agent.Invocation{Name: "mid", ToolCallID: "c"})
			}
		}()
	}
	wg.Wait()
}

// NewRegistry: names are 1..MaxNameBytes bytes of ASCII letters, digits,
// '_' and '-'; every error wraps journal.ErrInvalid (never a panic).
func TestBBNewRegistryNames(t *testing.T) {
	for _, name := range []string{"", strings.Repeat("a", agent.MaxNameBytes+1), "a b", "é", "a.b", "a/b", "\xff", "a\x00"} {
		_, err := agent.NewRegistry(okTool(name))
		require.ErrorIs(t, err, journal.ErrInvalid, "name %q", name)
	}
	_, err := agent.NewRegistry(okTool(strings.Repeat("a", agent.MaxNameBytes)), okTool("A_-9"))
	require.NoError(t, err)
	for _, params := range []string{"[]", "null", `"x"`, "{", "{}{}", "{\"a\":\"\xff\"}"} {
		tl := okTool("p")
		tl.Parameters = params
		_, err := agent.NewRegistry(tl)
		require.ErrorIs(t, err, journal.ErrInvalid, "parameters %q", params)
	}
	_, err = agent.NewRegistry(agent.Tool{Name: "x"}) // no executor
	require.ErrorIs(t, err, journal.ErrInvalid)
	_, err = agent.NewRegistry(agent.Tool{Name: "x", Executor: messages.Executor(99)})
	require.ErrorIs(t, err, journal.ErrInvalid)
}

// CheckCall: the arguments must be a JSON object; an empty string is not.
func TestBBCheckCallHostile(t *testing.T) {
	r, err := agent.NewRegistry(okTool("t"))
	require.NoError(t, err)
	require.NoError(t, r.CheckCall("t", ` {"a": [1, 2]} `))
	for _, args := range []string{"", "null", "[]", "1", `"s"`, "{", "{\"a\":\"\xff\"}", strings.Repeat("[", 20000) + strings.Repeat("]", 20000)} {
		require.ErrorIs(t, r.CheckCall("t", args), journal.ErrInvalid, "arguments %.20q", args)
	}
	for _, name := range []string{"", "\xff", strings.Repeat("x", 1<<20)} {
		err := r.CheckCall(name, "{}")
		require.ErrorIs(t, err, journal.ErrInvalid)
		assert.True(t, utf8.ValidString(err.Error()))
		assert.Less(t, len(err.Error()), 4<<10, "the error does not echo a huge name")
	}
}

// RunServer: the outcome's message is valid UTF-8 and at most MaxErrorBytes
// long, whatever the tool's error or panic holds; never nil.
func TestBBRunServerHostileErrors(t *testing.T) {
	huge := strings.Repeat("\xffé", agent.MaxErrorBytes)
	r, err := agent.NewRegistry(
		agent.Tool{Name: "fail", Executor: messages.Executor_EXECUTOR_SERVER,
			Run: func(context.Context, agent.Invocation) (string, error) { return "", errors.New(huge) }},
		agent.Tool{Name: "panic", Executor: messages.Executor_EXECUTOR_SERVER,
			Run: func(context.Context, agent.Invocation) (string, error) { panic(huge) }},
		agent.Tool{Name: "nilpanic", Executor: messages.Executor_EXECUTOR_SERVER,
			Run: func(context.Context, agent.Invocation) (string, error) { panic(nil) }},
		agent.Tool{Name: "bad", Executor: messages.Executor_EXECUTOR_SERVER,
			Run: func(context.Context, agent.Invocation) (string, error) { return "\xffnot json", nil }},
		agent.Tool{Name: "big", Executor: messages.Executor_EXECUTOR_SERVER,
			Run: func(context.Context, agent.Invocation) (string, error) {
				return `"` + strings.Repeat("a", agent.MaxResultBytes) + `"`, nil
			}},
	)
	require.NoError(t, err)
	want := map[string]string{"fail": agent.CodeTool, "panic": agent.CodePanic, "nilpanic": agent.CodePanic, "big": agent.CodeTooLarge}
	for name, code := range want {
		out := r.RunServer(context.Background(), agent.Invocation{Name: name, ToolCallID: "c"})
		require.NotNil(t, out, name)
		assert.Equal(t, code, out.GetError().GetCode(), name)
		msg := out.GetError().GetMessage()
		assert.True(t, utf8.ValidString(msg), name)
		assert.LessOrEqual(t, len(msg), agent.MaxErrorBytes, name)
	}
	out := r.RunServer(context.Background(), agent.Invocation{Name: "bad", ToolCallID: "c"})
	content := out.GetContent()
	assert.True(t, agent.ValidJSON(content), "invalid content becomes a JSON string: %q", content)
	assert.True(t, strings.HasPrefix(content, `"`))
}

// ErrorOutcome: valid UTF-8, cut to MaxErrorBytes at a rune boundary, ending
// in "..." when cut.
func TestBBErrorOutcome(t *testing.T) {
	out := agent.ErrorOutcome("c", strings.Repeat("é", agent.MaxErrorBytes))
	msg := out.GetError().GetMessage()
	assert.True(t, utf8.ValidString(msg))
	assert.LessOrEqual(t, len(msg), agent.MaxErrorBytes)
	assert.True(t, strings.HasSuffix(msg, "..."))
	assert.Equal(t, "c", out.GetError().GetCode())
	assert.Equal(t, "short\uFFFD", agent.ErrorOutcome("c", "short\xff").GetError().GetMessage())
	assert.Equal(t, "", agent.ErrorOutcome("", "").GetError().GetMessage())
}

// ValidateSettings: a finite temperature >= 0, MaxTokens >= 0, valid UTF-8,
// bounded lengths, a known tool choice; errors wrap journal.ErrInvalid.
func TestBBValidateSettingsHostile(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	bad := []agent.Settings{
		{Temperature: f(math.NaN())},
		{Temperature: f(math.Inf(1))},
		{Temperature: f(math.Inf(-1))},
		{Temperature: f(-0.1)},
		{MaxTokens: -1},
		{MaxTokens: math.MinInt64},
		{SystemPrompt: "\xff"},
		{SystemPrompt: strings.Repeat("a", agent.MaxSystemPromptBytes+1)},
		{Model: "\xff"},
		{Model: strings.Repeat("a", agent.MaxModelNameBytes+1)},
		{ToolChoice: "\xff"},
		{ToolChoice: "no such"},
		{ToolChoice: strings.Repeat("a", 1<<20)},
	}
	for _, s := range bad {
		require.ErrorIs(t, agent.ValidateSettings(s, nil), journal.ErrInvalid, "%+v", s)
	}
	r, err := agent.NewRegistry(okTool("t"))
	require.NoError(t, err)
	require.ErrorIs(t, agent.ValidateSettings(agent.Settings{ToolChoice: "other"}, r), journal.ErrInvalid)
	require.NoError(t, agent.ValidateSettings(agent.Settings{ToolChoice: "t"}, r))
	require.NoError(t, agent.ValidateSettings(agent.Settings{}, nil))
	require.NoError(t, agent.ValidateSettings(agent.Settings{Temperature: f(0), MaxTokens: 0,
		SystemPrompt: strings.Repeat("a", agent.MaxSystemPromptBytes), Model: strings.Repeat("m", agent.MaxModelNameBytes)}, nil))
	for _, c := range []string{agent.ToolChoiceAuto, agent.ToolChoiceNone, agent.ToolChoiceRequired} {
		require.NoError(t, agent.ValidateSettings(agent.Settings{ToolChoice: c}, r))
	}
}

// SettingsOf: unknown keys are ignored; a value that does not parse leaves
// its field unset. Map: every key, "" for a field not set.
func TestBBSettingsOfHostile(t *testing.T) {
	s := agent.SettingsOf(map[string]string{"temperature": "NaN", "max_tokens": "-3", "other": "x"})
	assert.Nil(t, s.Temperature)
	assert.Zero(t, s.MaxTokens)
	assert.True(t, s.IsZero())
	s = agent.SettingsOf(map[string]string{"temperature": "warm", "max_tokens": "1e3"})
	assert.True(t, s.IsZero())
	assert.True(t, agent.SettingsOf(nil).IsZero())
	m := agent.Settings{}.Map()
	assert.Len(t, m, 5)
	for k, v := range m {
		assert.Empty(t, v, k)
	}
	zero := 0.0
	assert.False(t, agent.Settings{Temperature: &zero}.IsZero(), "a temperature of 0 is set")
	back := agent.SettingsOf(agent.Settings{Temperature: &zero}.Map())
	require.NotNil(t, back.Temperature)
	assert.Equal(t, 0.0, *back.Temperature)
}

// ValidateIdentity: valid UTF-8, bounded user id, at most MaxRoles roles of
// 1..MaxRoleBytes bytes; errors wrap journal.ErrInvalid.
func TestBBValidateIdentityHostile(t *testing.T) {
	bad := []agent.Identity{
		{UserID: "\xff"},
		{UserID: strings.Repeat("u", agent.MaxUserIDBytes+1)},
		{UserID: "u", Roles: []string{""}},
		{UserID: "u", Roles: []string{"\xff"}},
		{UserID: "u", Roles: []string{strings.Repeat("r", agent.MaxRoleBytes+1)}},
		{UserID: "u", Roles: make([]string, agent.MaxRoles+1)},
	}
	for _, id := range bad {
		require.ErrorIs(t, agent.ValidateIdentity(id), journal.ErrInvalid)
	}
	roles := make([]string, agent.MaxRoles)
	for i := range roles {
		roles[i] = strings.Repeat("r", agent.MaxRoleBytes)
	}
	require.NoError(t, agent.ValidateIdentity(agent.Identity{UserID: strings.Repeat("u", agent.MaxUserIDBytes), Roles: roles}))
	require.NoError(t, agent.ValidateIdentity(agent.Identity{}))
}

// Identity, Scope: zero/nil behaviour and copies.
func TestBBIdentityZeroValues(t *testing.T) {
	assert.True(t, agent.IdentityOf(nil).IsZero())
	assert.Nil(t, agent.Identity{}.Proto())
	id := agent.Identity{UserID: "bob", Roles: []string{"a"}}
	p := id.Proto()
	p.Roles[0] = "changed"
	assert.Equal(t, "a", id.Roles[0], "Proto copies the roles")
	sc := agent.ScopeOf(id)
	assert.Empty(t, sc.Permissions)
	assert.Nil(t, sc.Values)
	assert.True(t, sc.IsUser())
	assert.True(t, agent.SystemScope.IsSystem())
	assert.False(t, agent.SystemScope.IsUser())
	assert.True(t, agent.Scope{UserID: agent.SystemUserID, Roles: []string{"x"}}.IsSystem(), "reserved whatever its other fields")
	assert.False(t, agent.Scope{}.IsUser())
	assert.False(t, agent.Scope{}.Has("p"))
}

// Authorizers: AnyOf with none allows nothing; a refusal wraps ErrForbidden
// and the authorizer's error; a panic refuses; an anonymous resolver is
// refused unless AllowAnonymous.
func TestBBAuthorizers(t *testing.T) {
	ctx := context.Background()
	user := agent.Authorization{Tool: "h", Resolver: agent.Scope{UserID: "bob", Roles: []string{"approver"}}}
	require.Error(t, agent.AnyOf()(ctx, user))
	// nil authorizers are skipped (one used to panic when AnyOf reached it).
	require.Error(t, agent.AnyOf(nil)(ctx, user))
	require.Error(t, agent.AnyOf(nil, agent.RequireRole("other"))(ctx, user))
	require.NoError(t, agent.AnyOf(nil, agent.RequireRole("approver"))(ctx, user))
	require.NoError(t, agent.AnyOf(agent.RequireRole("other"), agent.RequireRole("approver"))(ctx, user))
	errMine := errors.New("mine")
	tl := agent.Tool{Name: "h", Executor: messages.Executor_EXECUTOR_HUMAN,
		Authorizer: func(context.Context, agent.Authorization) error { return errMine }}
	err := tl.Authorize(ctx, user)
	require.ErrorIs(t, err, agent.ErrForbidden)
	require.ErrorIs(t, err, errMine)
	tl.Authorizer = func(context.Context, agent.Authorization) error { panic("boom") }
	require.ErrorIs(t, tl.Authorize(ctx, user), agent.ErrForbidden)
	tl.Authorizer = nil
	require.NoError(t, tl.Authorize(ctx, user))
	require.ErrorIs(t, tl.Authorize(ctx, agent.Authorization{Tool: "h"}), agent.ErrForbidden)
	tl.AllowAnonymous = true
	require.NoError(t, tl.Authorize(ctx, agent.Authorization{Tool: "h"}))
	// RequesterOnly: an unknown requester can not be answered, even by an
	// anonymous resolver.
	require.Error(t, agent.RequesterOnly()(ctx, agent.Authorization{}))
	require.NoError(t, agent.RequesterOnly()(ctx, agent.Authorization{Requester: agent.Identity{UserID: "bob"}, Resolver: agent.Scope{UserID: "bob"}}))
}

// Reply: no text part if text is empty; the calls in order. Call leaves the
// id empty.
func TestBBBuilders(t *testing.T) {
	m := agent.Reply("", agent.Call("a", "{}"), agent.Call("b", "{}"))
	assert.Empty(t, m.GetContent())
	require.Len(t, m.GetToolCalls(), 2)
	assert.Equal(t, "a", m.GetToolCalls()[0].GetName())
	assert.Empty(t, m.GetToolCalls()[0].GetId())
	assert.Empty(t, agent.Text("hi").GetToolCalls())
}

// CallDeadline: a Deadline outside the years 1 to 9999, or one that panics,
// gives the Timeout rule.
func TestBBCallDeadlineHostile(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, d := range []func(string, time.Time) time.Time{
		func(string, time.Time) time.Time { return time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) },
		func(string, time.Time) time.Time { return time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC) },
		func(string, time.Time) time.Time { panic("x") },
	} {
		tl := agent.Tool{Timeout: time.Minute, Deadline: d}
		assert.Equal(t, now.Add(time.Minute), tl.CallDeadline("{}", now))
	}
	assert.True(t, agent.Tool{Timeout: -1}.CallDeadline("", now).IsZero())
	assert.Equal(t, now.Add(agent.DefaultHumanTimeout), agent.Tool{}.CallDeadline("", now))
}
