//go:build !race

package lazarus_test

// Two cluster members in one process: protoactor's remote sets grpc's
// process-wide logger when a member starts (remote.Remote.Start calls
// grpclog.SetLoggerV2) while the other member's grpc reads it, a race
// inside protoactor and grpc that the race detector reports whatever the
// test does. The multi-process cluster tests (tests/cluster) run each
// member in its own process; this one, built without -race only (make
// test), checks in one process what they cannot see from outside a
// member: the scope a forwarded call runs with.

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestDocsTwoMembersForwardACall: two members in one process on one Store.
// Each sees both (Members, sorted), they agree on every owner, and a call
// made on the member that does not own a conversation runs on its owner:
// its server tool runs there with the caller's identity and permissions
// but not its Scope.Values, which stay behind; IsActive and Active count
// each member's own live actors only.
func TestDocsTwoMembersForwardACall(t *testing.T) {
	store := memjournal.New(memjournal.Options{})
	type seen struct {
		member string
		scope  agent.Scope
	}
	runs := make(chan seen, 4)
	var rts [2]*lazarus.Runtime
	var models [2]*scripted.Model
	open := func(i, am int, seeds []string) (*lazarus.Runtime, error) {
		model := scripted.New(scripted.Options{})
		models[i] = model
		tool := agent.Tool{Name: "whoami", Description: "says who runs it", Executor: messages.Executor_EXECUTOR_SERVER,
			Run: func(_ context.Context, inv agent.Invocation) (string, error) {
				runs <- seen{member: rts[i].Address(), scope: inv.Scope}
				return `"ok"`, nil
			}}
		return lazarus.Open(lazarus.Options{Store: store, Model: model, Tools: []agent.Tool{tool}, IdleTimeout: -1,
			Logger:  slog.New(slog.DiscardHandler),
			Cluster: &lazarus.ClusterOptions{AutoManagedPort: am, Seeds: seeds}})
	}
	copy(rts[:], lazarus.OpenAutoManagedMembers(t, 2, open))
	for _, rt := range rts {
		t.Cleanup(func() { _ = rt.Close() })
	}
	both := []string{rts[0].Address(), rts[1].Address()}
	slices.Sort(both)
	for _, rt := range rts {
		require.Eventually(t, func() bool { return slices.Equal(rt.Members(), both) }, 20*time.Second, 10*time.Millisecond,
			"%s sees both members: %v", rt.Address(), rt.Members())
	}
	conv := ""
	for i := 0; conv == ""; i++ {
		id := "fwd-" + strconv.Itoa(i)
		require.Equal(t, rts[0].Owner(id), rts[1].Owner(id), "the members agree on the owner of %s", id)
		if rts[0].Owner(id) == rts[1].Address() {
			conv = id
		}
	}
	caller, owner := rts[0], rts[1]
	for _, m := range models {
		m.Push(conv, scripted.Reply("", scripted.Call("whoami", `{}`)), scripted.Text("done"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	scope := agent.Scope{UserID: "alice", Roles: []string{"approver"}, Permissions: []string{"refunds"},
		Values: map[string]any{"handle": 42}}
	out, err := caller.SendAndWait(ctx, conv, "hi", scope)
	require.NoError(t, err)
	require.NotNil(t, out)
	select {
	case s := <-runs:
		require.Equal(t, owner.Address(), s.member, "the tool ran on the owner")
		require.Equal(t, "alice", s.scope.UserID)
		require.Equal(t, []string{"approver"}, s.scope.Roles)
		require.Equal(t, []string{"refunds"}, s.scope.Permissions)
		require.Empty(t, s.scope.Values, "Scope.Values stay behind")
	case <-ctx.Done():
		t.Fatal("the tool never ran")
	}
	require.True(t, owner.IsActive(conv))
	require.False(t, caller.IsActive(conv), "the caller counts its own actors only")
	require.Equal(t, 1, owner.Active())
	require.Equal(t, 0, caller.Active())
	evs, err := caller.History(ctx, conv, 0, 0)
	require.NoError(t, err)
	require.NotEmpty(t, evs)
}
