package tests

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// unavailableReads is a Store whose revival reads fail with
// journal.ErrUnavailable while down is set, as a PostgreSQL store's do
// while its server is unreachable.
type unavailableReads struct {
	journal.Store
	down atomic.Bool
}

var errStoreDown = fmt.Errorf("tests: injected: the server is unreachable: %w", journal.ErrUnavailable)

func (s *unavailableReads) Conversation(ctx context.Context, id string) (*messages.Conversation, error) {
	if s.down.Load() {
		return nil, errStoreDown
	}
	return s.Store.Conversation(ctx, id)
}

func (s *unavailableReads) LoadSince(ctx context.Context, id string) (*messages.Summary, []*messages.Event, error) {
	if s.down.Load() {
		return nil, nil, errStoreDown
	}
	return s.Store.LoadSince(ctx, id)
}

// TestRevivalWhileTheStoreIsUnavailable: a command to a dead conversation
// while the Store cannot be read fails with an error wrapping
// journal.ErrUnavailable, writes nothing and calls no model; once the
// Store is back, the next command revives the conversation, which owes
// what the log says (here a server call the kill interrupted, run again
// once under its id) and then takes the message.
func TestRevivalWhileTheStoreIsUnavailable(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		store := &unavailableReads{Store: openStore(t, kind)}
		// No resume scan: Open's wakes, in the background, every ACTIVE
		// conversation, and "c" is ACTIVE from its first send on (a server
		// call running). A scan that listed it and got to it between the
		// kill and the Store going down revived it, and the sends below
		// met a live activation that needs no read.
		h := newHarness(t, store, func(o *lazarus.Options) { o.NoResume = true })
		h.chargeGate = make(chan struct{})
		ctx := ctxT(t)
		h.model.Push("c",
			scripted.Reply("charging", scripted.Call("charge", `{"amount":5}`)),
			scripted.Text("charged, and here I am"))
		_, err := h.rt.Send(ctx, "c", "charge me", user)
		require.NoError(t, err)
		first := recv(t, h.chargeStarted, "charge started")
		require.True(t, h.rt.Kill("c"))
		before := h.history("c")

		store.down.Store(true)
		for range 2 {
			_, err = h.rt.Send(ctx, "c", "are you there?", user)
			require.ErrorIs(t, err, journal.ErrUnavailable)
			require.ErrorIs(t, h.rt.Wake(ctx, "c"), journal.ErrUnavailable)
		}
		store.down.Store(false)
		require.Equal(t, types(before), types(h.history("c")), "nothing is written")
		require.Equal(t, 1, h.model.Calls("c"), "no model call while the store is down")

		close(h.chargeGate)
		_, err = h.rt.Send(ctx, "c", "are you there?", user)
		require.NoError(t, err)
		h.awaitEvent("c", 0, isAssistantText("charged, and here I am"))
		evs := h.history("c")
		requireGapFree(t, evs)
		require.Equal(t, []string{
			"user_msg", "assistant_msg", "tool_call:charge", "user_msg", "tool_result:charge", "assistant_msg",
		}, types(evs))
		require.Equal(t, []string{first, first}, h.runs.of("charge"), "the interrupted call ran again under its id")
	})
}
