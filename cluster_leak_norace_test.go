//go:build !race

package lazarus_test

// Two cluster members in one process race inside protoactor and grpc (see
// cluster_docs_norace_test.go): built without -race only (make test).

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
	"github.com/lazarusrt/lazarus/internal/leakcheck"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestTwoMembersCloseLeaveNoGoroutine: two cluster members in one process
// on one Store, one forwarding a send-and-wait to the other and following
// a subscription there (a stream the other's gateway serves), leave no
// goroutine of their own or of protoactor's once both closed, the
// subscription still open at the first Close (but protoactor's cluster
// log throttles, which nothing can stop).
func TestTwoMembersCloseLeaveNoGoroutine(t *testing.T) {
	if !leakcheck.Isolate(t) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := leakcheck.Take()
	store := memjournal.New(memjournal.Options{})
	model := agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	})
	rts := lazarus.OpenAutoManagedMembers(t, 2, func(_, am int, seeds []string) (*lazarus.Runtime, error) {
		return lazarus.Open(lazarus.Options{Store: store, Model: model, IdleTimeout: -1, Logger: slog.New(slog.DiscardHandler),
			Cluster: &lazarus.ClusterOptions{AutoManagedPort: am, Seeds: seeds}})
	})
	both := []string{rts[0].Address(), rts[1].Address()}
	slices.Sort(both)
	for _, rt := range rts {
		require.Eventually(t, func() bool { return slices.Equal(rt.Members(), both) }, 20*time.Second, 10*time.Millisecond,
			"%s sees both members: %v", rt.Address(), rt.Members())
	}
	caller, owner := rts[0], rts[1]
	conv := ""
	for i := 0; conv == ""; i++ {
		if id := "leak-" + strconv.Itoa(i); caller.Owner(id) == owner.Address() && owner.Owner(id) == owner.Address() {
			conv = id
		}
	}
	_, err := caller.SendAndWait(ctx, conv, "hi", user)
	require.NoError(t, err)
	require.True(t, owner.IsActive(conv), "it ran on its owner")
	updates, err := caller.Subscribe(context.Background(), conv, 0)
	require.NoError(t, err)
	select {
	case u := <-updates:
		require.Equal(t, uint64(1), u.Event.GetSeq(), "the owner streams the history")
	case <-ctx.Done():
		t.Fatal("no update")
	}
	require.NoError(t, caller.Close())
	for range updates { // closed by Close
	}
	require.NoError(t, owner.Close())
	base.Check(t, leakWithin, clusterThrottles...)
}
