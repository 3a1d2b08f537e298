package lazarus_test

// Black-box tests of the cluster API as its documentation states it
// (README "In a cluster", ClusterOptions, Options.ActorSystem,
// Runtime.Address, Owner and Members), in one process.

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestDocsClusterDefaults: the documented defaults of ClusterOptions and
// the names every member uses.
func TestDocsClusterDefaults(t *testing.T) {
	require.Equal(t, "lazarus", lazarus.DefaultClusterName)
	require.Equal(t, 500*time.Millisecond, lazarus.DefaultRefreshTTL)
	require.Equal(t, 2*time.Second, lazarus.DefaultRequestTimeout)
	require.Equal(t, "lazarus-gateway", lazarus.GatewayName)
	require.NotEmpty(t, lazarus.ConversationKind)
}

// TestDocsNotAClusterMember: a Runtime without Options.Cluster has no
// address, owner or members ("" and nil, as their docs say).
func TestDocsNotAClusterMember(t *testing.T) {
	rt, err := lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{})})
	require.NoError(t, err)
	defer rt.Close()
	require.Equal(t, "", rt.Address())
	require.Equal(t, "", rt.Owner("c"))
	require.Nil(t, rt.Members())
}

// TestDocsClusterOptionsRefused: Open refuses, with an error wrapping
// journal.ErrInvalid, cluster options without a Provider that lack Seeds
// or AutoManagedPort, and an AdvertisedHost without a Port; a refused Open
// leaves the directory it opened free for the next Open.
func TestDocsClusterOptionsRefused(t *testing.T) {
	dir := t.TempDir()
	for name, o := range map[string]lazarus.ClusterOptions{
		"no seeds":                  {AutoManagedPort: 7101},
		"no automanaged port":       {Seeds: []string{"127.0.0.1:7101"}},
		"advertised host, no port":  {AutoManagedPort: 7101, Seeds: []string{"127.0.0.1:7101"}, AdvertisedHost: "10.0.0.1"},
		"advertised host, negative": {Port: -1, AutoManagedPort: 7101, Seeds: []string{"127.0.0.1:7101"}, AdvertisedHost: "10.0.0.1"},
	} {
		o := o
		_, err := lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), Dir: dir, Cluster: &o})
		require.ErrorIs(t, err, journal.ErrInvalid, name)
	}
	rt, err := lazarus.Open(lazarus.Options{Model: scripted.New(scripted.Options{}), Dir: dir})
	require.NoError(t, err, "the refused Opens released the directory")
	require.NoError(t, rt.Close())
}

// TestDocsActorSystemOutlivesTheRuntime: without Cluster, a Runtime on the
// application's actor system leaves it running when it closes: the
// application's actors still answer, and a new Runtime can open on it.
func TestDocsActorSystemOutlivesTheRuntime(t *testing.T) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	defer sys.Shutdown()
	app := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if s, ok := c.Message().(string); ok {
			c.Respond(s + "!")
		}
	}))
	model := agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	})
	rt, err := lazarus.Open(lazarus.Options{Model: model, ActorSystem: sys})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.NoError(t, rt.Close())
	require.False(t, sys.IsStopped(), "Close left the application's system running")
	res, err := sys.Root.RequestFuture(app, "ping", 10*time.Second).Result()
	require.NoError(t, err)
	require.Equal(t, "ping!", res)
	rt2, err := lazarus.Open(lazarus.Options{Model: model, ActorSystem: sys})
	require.NoError(t, err, "the closed Runtime's actors left the system")
	_, err = rt2.SendAndWait(ctx, "d", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.NoError(t, rt2.Close())
}

// TestDocsSingleMemberCluster: a cluster of one member on the application's
// actor system: Address is its host:port, Members lists it alone, Owner of
// any conversation is it, a send runs here (IsActive, Active), and Close
// leaves the cluster and shuts the system down with it.
func TestDocsSingleMemberCluster(t *testing.T) {
	model := agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	})
	var sys *actor.ActorSystem
	rt := lazarus.OpenAutoManagedMembers(t, 1, func(_, am int, seeds []string) (*lazarus.Runtime, error) {
		s := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
			return slog.New(slog.DiscardHandler)
		}))
		t.Cleanup(func() {
			if !s.IsStopped() { // Close shut it down
				s.Shutdown()
			}
		})
		sys = s
		return lazarus.Open(lazarus.Options{Model: model, ActorSystem: s, IdleTimeout: -1,
			Cluster: &lazarus.ClusterOptions{AutoManagedPort: am, Seeds: seeds}})
	})[0]
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = rt.Close()
		}
	})
	self := rt.Address()
	host, port, err := net.SplitHostPort(self)
	require.NoError(t, err, "Address is host:port: %q", self)
	require.Equal(t, "127.0.0.1", host, "the default host")
	require.NotEqual(t, "0", port, "port 0 picked a free one")
	require.Eventually(t, func() bool {
		ms := rt.Members()
		return len(ms) == 1 && ms[0] == self
	}, 20*time.Second, 10*time.Millisecond, "Members lists this member alone: %v", rt.Members())
	for _, id := range []string{"a", "b", "c", "d"} {
		require.Equal(t, self, rt.Owner(id), id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = rt.SendAndWait(ctx, "a", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.True(t, rt.IsActive("a"))
	require.Equal(t, 1, rt.Active())
	closed = true
	require.NoError(t, rt.Close())
	require.True(t, sys.IsStopped(), "with Cluster, Close shuts the application's system down")
	_, err = rt.Send(ctx, "a", "again", agent.Scope{UserID: "u"})
	require.ErrorIs(t, err, lazarus.ErrClosed)
}
