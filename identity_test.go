package lazarus_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

var (
	alice = agent.Scope{UserID: "alice", Roles: []string{"buyer"}, Permissions: []string{"pay"}, Values: map[string]any{"token": "t-alice"}}
	bob   = agent.Scope{UserID: "bob", Roles: []string{"approver"}, Values: map[string]any{"token": "t-bob"}}
	carol = agent.Scope{UserID: "carol"}
)

// identityRuntime opens a Runtime whose model asks for tool `ask` (a human
// tool defined by human), then calls the server tool "whoami" (which
// requires a user and reports the scope it ran with on ran), then answers.
func identityRuntime(t *testing.T, opts lazarus.Options, human agent.Tool, ran chan<- agent.Scope) (*lazarus.Runtime, *scripted.Model) {
	t.Helper()
	model := scripted.New(scripted.Options{})
	human.Name, human.Executor = "ask", messages.Executor_EXECUTOR_HUMAN
	if human.Timeout == 0 {
		human.Timeout = time.Hour
	}
	opts.Model, opts.IdleTimeout = model, -1
	opts.Tools = []agent.Tool{human, {
		Name: "whoami", Executor: messages.Executor_EXECUTOR_SERVER, RequiresUser: true,
		Run: func(_ context.Context, inv agent.Invocation) (string, error) {
			ran <- inv.Scope
			return `{"ok":true}`, nil
		},
	}}
	rt, err := lazarus.Open(opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	return rt, model
}

// askAndSuspend makes conv's model ask for `ask`, then whoami, then
// answer; sends as scope and returns the pending call's id.
func askAndSuspend(ctx context.Context, t *testing.T, rt *lazarus.Runtime, model *scripted.Model, conv string, scope agent.Scope) string {
	t.Helper()
	model.Push(conv,
		scripted.Reply("asking", scripted.Call("ask", `{"amount":120}`)),
		scripted.Reply("checking", scripted.Call("whoami", `{}`)),
		scripted.Text("done"))
	end, err := rt.SendAndWait(ctx, conv, "pay 120", scope)
	require.NoError(t, err)
	require.Equal(t, lazarus.TurnSuspended, end.Outcome)
	require.Len(t, end.Pending, 1)
	return end.Pending[0].GetToolCallId()
}

// awaitAnswer waits for the end of conv's turn after seq.
func awaitAnswer(ctx context.Context, t *testing.T, rt *lazarus.Runtime, conv string) {
	t.Helper()
	updates, err := rt.Subscribe(ctx, conv, 0)
	require.NoError(t, err)
	for u := range updates {
		if u.TurnEnd != nil && u.TurnEnd.Outcome == lazarus.TurnAnswered {
			return
		}
	}
	t.Fatalf("conversation %q: no answer: %v", conv, ctx.Err())
}

func TestLogRecordsRequesterAndResolver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ran := make(chan agent.Scope, 4)
	rt, model := identityRuntime(t, lazarus.Options{}, agent.Tool{}, ran)
	id := askAndSuspend(ctx, t, rt, model, "c", alice)

	require.NoError(t, rt.Resolve(ctx, id, `{"approved":true}`, bob))
	awaitAnswer(ctx, t, rt, "c")

	evs, err := rt.History(ctx, "c", 0, 0)
	require.NoError(t, err)
	var author, resolver *messages.Identity
	for _, ev := range evs {
		if ev.GetUserMsg() != nil {
			author = ev.GetAuthor()
		}
		if r := ev.GetResolution(); r != nil {
			resolver = r.GetResolver()
			require.Equal(t, "user", r.GetBy())
		}
	}
	require.Equal(t, "alice", author.GetUserId(), "the user message names its author")
	require.Equal(t, []string{"buyer"}, author.GetRoles())
	require.Equal(t, "bob", resolver.GetUserId(), "the resolution names who answered")
	require.Equal(t, []string{"approver"}, resolver.GetRoles())

	row, err := rt.Store().ToolCall(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "alice", row.GetRequester().GetUserId(), "the row names who asked")
	require.Equal(t, "bob", row.GetResolver().GetUserId(), "the row names who answered")
}

func TestAnonymousAnswersAreRefusedUnlessAllowed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, allow := range []bool{false, true} {
		ran := make(chan agent.Scope, 4)
		rt, model := identityRuntime(t, lazarus.Options{}, agent.Tool{AllowAnonymous: allow}, ran)
		id := askAndSuspend(ctx, t, rt, model, "c", alice)
		before, err := rt.History(ctx, "c", 0, 0)
		require.NoError(t, err)

		err = rt.Resolve(ctx, id, `{"approved":true}`, agent.Scope{})
		if !allow {
			require.ErrorIs(t, err, lazarus.ErrForbidden)
			require.ErrorIs(t, rt.Reject(ctx, id, "no", agent.Scope{}), lazarus.ErrForbidden)
			row, err := rt.Store().ToolCall(ctx, id)
			require.NoError(t, err)
			require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, row.GetStatus(), "nothing written")
			after, err := rt.History(ctx, "c", 0, 0)
			require.NoError(t, err)
			require.Len(t, after, len(before), "nothing written")
			continue
		}
		require.NoError(t, err, "the tool allows anonymous answers")
		row, err := rt.Store().ToolCall(ctx, id)
		require.NoError(t, err)
		require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, row.GetStatus())
		require.Nil(t, row.GetResolver(), "an anonymous resolver has no identity")
	}
}

func TestAuthorizersDecideWhoMayAnswer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name      string
		authorize agent.Authorizer
		refused   []agent.Scope
		allowed   agent.Scope
	}{
		{"role", agent.RequireRole("approver"), []agent.Scope{carol, alice}, bob},
		{"requester", agent.RequesterOnly(), []agent.Scope{bob, carol}, alice},
		{"any of", agent.AnyOf(agent.RequireRole("approver"), agent.RequesterOnly()), []agent.Scope{carol}, bob},
		{"panics", func(context.Context, agent.Authorization) error { panic("boom") }, []agent.Scope{bob}, agent.Scope{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ran := make(chan agent.Scope, 4)
			rt, model := identityRuntime(t, lazarus.Options{}, agent.Tool{Authorizer: tc.authorize}, ran)
			id := askAndSuspend(ctx, t, rt, model, "c", alice)
			for _, s := range tc.refused {
				require.ErrorIs(t, rt.Resolve(ctx, id, `{"approved":true}`, s), lazarus.ErrForbidden, "Resolve by %q", s.UserID)
				require.ErrorIs(t, rt.Reject(ctx, id, "no", s), lazarus.ErrForbidden, "Reject by %q", s.UserID)
			}
			row, err := rt.Store().ToolCall(ctx, id)
			require.NoError(t, err)
			require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, row.GetStatus(), "refused answers write nothing")
			if tc.allowed.UserID == "" {
				return
			}
			require.NoError(t, rt.Reject(ctx, id, "not today", tc.allowed))
			row, err = rt.Store().ToolCall(ctx, id)
			require.NoError(t, err)
			require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED, row.GetStatus())
			require.Equal(t, tc.allowed.UserID, row.GetResolver().GetUserId())
		})
	}
}

func TestAuthorizerSeesTheCall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seen := make(chan agent.Authorization, 1)
	ran := make(chan agent.Scope, 4)
	rt, model := identityRuntime(t, lazarus.Options{}, agent.Tool{Authorizer: func(_ context.Context, a agent.Authorization) error {
		seen <- a
		return nil
	}}, ran)
	id := askAndSuspend(ctx, t, rt, model, "c", alice)
	require.NoError(t, rt.Reject(ctx, id, "no", bob))
	a := <-seen
	require.Equal(t, "c", a.ConversationID)
	require.Equal(t, id, a.ToolCallID)
	require.Equal(t, "ask", a.Tool)
	require.JSONEq(t, `{"amount":120}`, a.Arguments)
	require.Equal(t, "alice", a.Requester.UserID)
	require.Equal(t, []string{"buyer"}, a.Requester.Roles)
	require.Equal(t, "bob", a.Resolver.UserID)
	require.True(t, a.Reject)
}

// TestToolsRunForTheRequester: after bob answers the human call of a turn
// alice asked for, the turn's next tool runs with alice's scope: her own
// while the activation that took her message lives; rebuilt by the
// ScopeLoader from the identity in the log once it was killed; SystemScope
// (so a RequiresUser tool refuses) with no loader.
func TestToolsRunForTheRequester(t *testing.T) {
	loaded := agent.Scope{UserID: "alice", Roles: []string{"buyer"}, Permissions: []string{"reloaded"}}
	loader := func(_ context.Context, id agent.Identity) (agent.Scope, error) {
		return agent.Scope{UserID: id.UserID, Roles: id.Roles, Permissions: []string{"reloaded"}}, nil
	}
	for _, tc := range []struct {
		name   string
		loader agent.ScopeLoader
		kill   bool
		want   *agent.Scope // nil: the tool must not run
	}{
		{"live", nil, false, &alice},
		{"killed, loader", loader, true, &loaded},
		{"killed, no loader", nil, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ran := make(chan agent.Scope, 4)
			rt, model := identityRuntime(t, lazarus.Options{ScopeLoader: tc.loader}, agent.Tool{}, ran)
			id := askAndSuspend(ctx, t, rt, model, "c", alice)
			if tc.kill {
				require.True(t, rt.Kill("c"))
			}
			require.NoError(t, rt.Resolve(ctx, id, `{"approved":true}`, bob))
			awaitAnswer(ctx, t, rt, "c")
			evs, err := rt.History(ctx, "c", 0, 0)
			require.NoError(t, err)
			var whoami *messages.ToolOutcome
			for _, ev := range evs {
				if r := ev.GetToolResult(); r.GetName() == "whoami" {
					whoami = r.GetOutcome()
				}
			}
			require.NotNil(t, whoami, "whoami has a result")
			if tc.want == nil {
				require.Equal(t, agent.CodeScope, whoami.GetError().GetCode(), "the system scope is refused")
				require.Empty(t, ran)
				return
			}
			require.Empty(t, whoami.GetError().GetCode())
			require.Equal(t, *tc.want, <-ran, "the tool ran for the requester, never as the resolver")
		})
	}
}

func TestExpiryIsResolvedBySystem(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clock := actorstest.NewManualClock(time.Unix(1_700_000_000, 0))
	ran := make(chan agent.Scope, 4)
	rt, model := identityRuntime(t, lazarus.Options{Clock: clock}, agent.Tool{Timeout: time.Minute}, ran)
	id := askAndSuspend(ctx, t, rt, model, "c", alice)
	require.Eventually(t, func() bool {
		clock.Advance(time.Minute)
		row, err := rt.Store().ToolCall(ctx, id)
		return err == nil && row.GetStatus() == messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED
	}, 20*time.Second, 10*time.Millisecond)
	row, err := rt.Store().ToolCall(ctx, id)
	require.NoError(t, err)
	require.Equal(t, agent.SystemUserID, row.GetResolver().GetUserId())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		evs, err := rt.History(ctx, "c", 0, 0)
		require.NoError(c, err)
		for _, ev := range evs {
			if r := ev.GetResolution(); r != nil {
				assert.Equal(c, "system", r.GetBy())
				assert.Equal(c, agent.SystemUserID, r.GetResolver().GetUserId())
				return
			}
		}
		assert.Fail(c, "no resolution in the history")
	}, 20*time.Second, 10*time.Millisecond)
}

func TestScopesOverTheLimitsAreInvalid(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ran := make(chan agent.Scope, 4)
	rt, model := identityRuntime(t, lazarus.Options{}, agent.Tool{}, ran)
	id := askAndSuspend(ctx, t, rt, model, "c", alice)
	for _, s := range []agent.Scope{
		{UserID: string(make([]byte, agent.MaxUserIDBytes+1))},
		{UserID: "\xff"},
		{UserID: "u", Roles: []string{""}},
		{UserID: "u", Roles: make([]string, agent.MaxRoles+1)},
	} {
		_, err := rt.Send(ctx, "c", "hi", s)
		require.ErrorIs(t, err, journal.ErrInvalid)
		require.ErrorIs(t, rt.Resolve(ctx, id, `{}`, s), journal.ErrInvalid)
	}
	row, err := rt.Store().ToolCall(ctx, id)
	require.NoError(t, err)
	require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, row.GetStatus())
}
