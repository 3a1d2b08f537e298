package agent_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestValidateIdentityLimits checks the documented limits at and beyond
// their bounds.
func TestValidateIdentityLimits(t *testing.T) {
	roles := func(n int) []string {
		rs := make([]string, n)
		for i := range rs {
			rs[i] = "r"
		}
		return rs
	}
	good := []agent.Identity{
		{},
		{UserID: strings.Repeat("u", agent.MaxUserIDBytes)},
		{UserID: "alice", Roles: roles(agent.MaxRoles)},
		{UserID: "alice", Roles: []string{strings.Repeat("r", agent.MaxRoleBytes)}},
		{UserID: "é", Roles: []string{"ü"}},
	}
	for _, id := range good {
		assert.NoError(t, agent.ValidateIdentity(id), "%+v", id)
	}
	bad := []agent.Identity{
		{UserID: strings.Repeat("u", agent.MaxUserIDBytes+1)},
		{UserID: "a\xff"},
		{UserID: "alice", Roles: roles(agent.MaxRoles + 1)},
		{UserID: "alice", Roles: []string{""}},
		{UserID: "alice", Roles: []string{strings.Repeat("r", agent.MaxRoleBytes+1)}},
		{UserID: "alice", Roles: []string{"r\xff"}},
	}
	for _, id := range bad {
		assert.ErrorIs(t, agent.ValidateIdentity(id), journal.ErrInvalid, "%.40q", id.UserID)
	}
}

// TestIdentityCopies checks that Identity, ScopeOf, Proto and IdentityOf
// copy the roles, and that the zero identity is stored as nil.
func TestIdentityCopies(t *testing.T) {
	s := agent.Scope{UserID: "alice", Roles: []string{"approver"}, Permissions: []string{"p"}, Values: map[string]any{"k": 1}}
	id := s.Identity()
	s.Roles[0] = "x"
	assert.Equal(t, agent.Identity{UserID: "alice", Roles: []string{"approver"}}, id)

	sc := agent.ScopeOf(id)
	id.Roles[0] = "y"
	assert.Equal(t, agent.Scope{UserID: "alice", Roles: []string{"approver"}}, sc)

	p := sc.Identity().Proto()
	require.NotNil(t, p)
	back := agent.IdentityOf(p)
	p.Roles[0] = "z"
	assert.Equal(t, agent.Identity{UserID: "alice", Roles: []string{"approver"}}, back)

	assert.Nil(t, agent.Identity{}.Proto())
	assert.True(t, agent.IdentityOf(nil).IsZero())
	assert.False(t, agent.Identity{Roles: []string{"r"}}.IsZero())
	assert.True(t, agent.Identity{Roles: []string{"r"}}.HasRole("r"))
	assert.Equal(t, &messages.Identity{Roles: []string{"r"}}, agent.Identity{Roles: []string{"r"}}.Proto())
}

// TestToolAuthorize checks Tool.Authorize's rules: an anonymous answer is
// refused unless AllowAnonymous, then the Authorizer decides; a refusal
// wraps ErrForbidden and the authorizer's error; a panic refuses.
func TestToolAuthorize(t *testing.T) {
	ctx := context.Background()
	bob := agent.Scope{UserID: "bob"}
	anon := agent.Scope{}
	approver := agent.Scope{UserID: "carol", Roles: []string{"approver"}}

	open := agent.Tool{Name: "ask", Executor: messages.Executor_EXECUTOR_HUMAN}
	assert.NoError(t, open.Authorize(ctx, agent.Authorization{Tool: "ask", Resolver: bob}))
	assert.ErrorIs(t, open.Authorize(ctx, agent.Authorization{Tool: "ask", Resolver: anon}), agent.ErrForbidden)

	open.AllowAnonymous = true
	assert.NoError(t, open.Authorize(ctx, agent.Authorization{Tool: "ask", Resolver: anon}))

	mine := errors.New("mine")
	own := agent.Tool{Name: "ask", Executor: messages.Executor_EXECUTOR_HUMAN,
		Authorizer: func(context.Context, agent.Authorization) error { return mine }}
	err := own.Authorize(ctx, agent.Authorization{Tool: "ask", Resolver: bob})
	assert.ErrorIs(t, err, agent.ErrForbidden)
	assert.ErrorIs(t, err, mine)

	role := agent.Tool{Name: "ask", Executor: messages.Executor_EXECUTOR_HUMAN, Authorizer: agent.RequireRole("approver")}
	assert.NoError(t, role.Authorize(ctx, agent.Authorization{Tool: "ask", Resolver: approver}))
	assert.ErrorIs(t, role.Authorize(ctx, agent.Authorization{Tool: "ask", Resolver: bob}), agent.ErrForbidden)
	role.AllowAnonymous = true // the authorizer still decides
	assert.ErrorIs(t, role.Authorize(ctx, agent.Authorization{Tool: "ask", Resolver: anon}), agent.ErrForbidden)

	panicky := agent.Tool{Name: "ask", Executor: messages.Executor_EXECUTOR_HUMAN,
		Authorizer: func(context.Context, agent.Authorization) error { panic("boom") }}
	assert.ErrorIs(t, panicky.Authorize(ctx, agent.Authorization{Tool: "ask", Resolver: bob}), agent.ErrForbidden)

	req := agent.Tool{Name: "ask", Executor: messages.Executor_EXECUTOR_HUMAN, Authorizer: agent.RequesterOnly()}
	assert.NoError(t, req.Authorize(ctx, agent.Authorization{Requester: agent.Identity{UserID: "bob"}, Resolver: bob}))
	assert.ErrorIs(t, req.Authorize(ctx, agent.Authorization{Requester: agent.Identity{UserID: "alice"}, Resolver: bob}), agent.ErrForbidden)
	assert.ErrorIs(t, req.Authorize(ctx, agent.Authorization{Resolver: bob}), agent.ErrForbidden, "an unknown requester")

	none := agent.Tool{Name: "ask", Executor: messages.Executor_EXECUTOR_HUMAN, Authorizer: agent.AnyOf()}
	assert.ErrorIs(t, none.Authorize(ctx, agent.Authorization{Resolver: bob}), agent.ErrForbidden)
	either := agent.Tool{Name: "ask", Executor: messages.Executor_EXECUTOR_HUMAN,
		Authorizer: agent.AnyOf(agent.RequireRole("approver"), agent.RequesterOnly())}
	assert.NoError(t, either.Authorize(ctx, agent.Authorization{Requester: agent.Identity{UserID: "bob"}, Resolver: bob}))
	assert.NoError(t, either.Authorize(ctx, agent.Authorization{Requester: agent.Identity{UserID: "bob"}, Resolver: approver}))
	err = either.Authorize(ctx, agent.Authorization{Requester: agent.Identity{UserID: "alice"}, Resolver: bob})
	assert.ErrorIs(t, err, agent.ErrForbidden)
	assert.Contains(t, err.Error(), `role "approver"`)
	assert.Contains(t, err.Error(), "only the requester")
}

func TestCheckpointFileWithoutCheckpointer(t *testing.T) {
	err := agent.Invocation{}.CheckpointFile(context.Background(), "a.txt")
	assert.ErrorIs(t, err, agent.ErrNoCheckpoints)
}

// AnyOf keeps its own copy of the authorizers: reusing the slice it was
// given (as a loop building rules does) changes no rule already built,
// which a Registry, immutable, holds.
func TestAnyOfCopiesItsAuthorizers(t *testing.T) {
	ctx := context.Background()
	bob := agent.Authorization{Tool: "h", Resolver: agent.Scope{UserID: "bob"}}
	rules := []agent.Authorizer{agent.RequireRole("approver")}
	strict := agent.AnyOf(rules...)
	rules[0] = func(context.Context, agent.Authorization) error { return nil } // allows anyone
	require.ErrorIs(t, (agent.Tool{Name: "h", Authorizer: strict}).Authorize(ctx, bob), agent.ErrForbidden)
}
