package lazarus_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// failingReadStore fails the revival's read of the log (LoadSince) with
// err while armed.
type failingReadStore struct {
	journal.Store
	err   error
	armed atomic.Bool
}

func (s *failingReadStore) LoadSince(ctx context.Context, id string) (*messages.Summary, []*messages.Event, error) {
	if s.armed.Load() {
		return nil, nil, fmt.Errorf("store: load %q: %w", id, s.err)
	}
	return s.Store.LoadSince(ctx, id)
}

// TestRevivalReadContextErrorKeepsItsSentinel: a call that starts an
// activation whose revival read fails with a context's error (a Store read
// that timed out, or one cancelled) returns an error wrapping that
// context's error, as the Runtime's contract says of a call that wrote
// nothing, not an unclassified one: the conversation actor's reply carries
// it across. It is not of unknown outcome (the send was never written).
func TestRevivalReadContextErrorKeepsItsSentinel(t *testing.T) {
	for _, cerr := range []error{context.DeadlineExceeded, context.Canceled} {
		t.Run(cerr.Error(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			st := &failingReadStore{Store: memjournal.New(memjournal.Options{}), err: cerr}
			model := scripted.New(scripted.Options{})
			rt, err := lazarus.Open(lazarus.Options{Model: model, Store: st, IdleTimeout: -1})
			require.NoError(t, err)
			defer rt.Close()

			st.armed.Store(true)
			msg := agent.UserMessage(agent.TextPart("hi"))
			_, err = rt.SendMessage(ctx, "c", msg, lazarus.SendOptions{RequestID: "r1"}, agent.Scope{UserID: "u"})
			require.Error(t, err)
			require.ErrorIs(t, err, cerr)
			require.False(t, errors.Is(err, lazarus.ErrUnknownOutcome), "nothing was written: %v", err)
			require.False(t, errors.Is(err, journal.ErrUnknownOutcome), "nothing was written: %v", err)

			// The Store reads again: the same send goes through.
			st.armed.Store(false)
			model.Push("c", scripted.Text("hello"))
			_, err = rt.SendMessage(ctx, "c", msg, lazarus.SendOptions{RequestID: "r1"}, agent.Scope{UserID: "u"})
			require.NoError(t, err)
		})
	}
}
