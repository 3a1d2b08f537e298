package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// fencedStore refuses every write with journal.ErrConflict, as a Store
// does whose conversation another writer keeps moving on.
type fencedStore struct{ journal.Store }

var errFencedWrite = fmt.Errorf("another writer moved the log on: %w", journal.ErrConflict)

func (fencedStore) Append(context.Context, *messages.AppendRequest) (journal.AppendResult, error) {
	return journal.AppendResult{}, errFencedWrite
}

func (fencedStore) AppendBatch(_ context.Context, reqs []*messages.AppendRequest) []journal.AppendResult {
	out := make([]journal.AppendResult, len(reqs))
	for i := range out {
		out[i].Err = errFencedWrite
	}
	return out
}

// TestAskThatRunsOutOfAttemptsKeepsTheLastError: every activation answers
// the send with a reply saying to retry (its write was fenced off), so Ask
// gives up after its attempts. Its error wraps ErrNoAnswer and
// actors.ErrAgentStopped, as documented, and also the last reply's own
// error (its sentinel and its text), so the caller learns why.
func TestAskThatRunsOutOfAttemptsKeepsTheLastError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	model := scripted.New(scripted.Options{})
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	s, err := Start(system, Config{
		Store:       fencedStore{memjournal.New(memjournal.Options{})},
		Agent:       func(string) actors.ConversationConfig { return actors.ConversationConfig{Model: model} },
		CallTimeout: 15 * time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		s.Stop()
		system.Shutdown()
	})
	_, err = s.Ask(ctx, "c", &actors.Command{Msg: &messages.AgentSend{RequestId: "r1", Message: &messages.UserMessage{
		Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "hi"}}}}}})
	require.Error(t, err)
	require.ErrorIs(t, err, ErrNoAnswer)
	require.ErrorIs(t, err, actors.ErrAgentStopped)
	require.ErrorIs(t, err, journal.ErrConflict, "the last reply's own error is kept")
	require.ErrorContains(t, err, "another writer moved the log on")
	require.NoError(t, ctx.Err(), "Ask gave up on its attempts, not on a timeout")
}

// TestStoppedError: what an attempt of Ask records of a stopped
// activation wraps actors.ErrAgentStopped and the stop's own error,
// naming ErrAgentStopped once.
func TestStoppedError(t *testing.T) {
	require.Equal(t, actors.ErrAgentStopped, stoppedError(nil))
	err := stoppedError(errFencedWrite)
	require.ErrorIs(t, err, actors.ErrAgentStopped)
	require.ErrorIs(t, err, journal.ErrConflict)
	require.Equal(t, errFencedWrite.Error()+": "+actors.ErrAgentStopped.Error(), err.Error())
	killed := fmt.Errorf("conversation %q killed: %w", "c", actors.ErrAgentStopped)
	err = stoppedError(journal.ErrorFromProto(journal.ErrorToProto(killed)))
	require.ErrorIs(t, err, actors.ErrAgentStopped)
	require.Equal(t, killed.Error(), err.Error(), "named once")
	// A retired activation's record: errRetired, and its stop cause.
	err = fmt.Errorf("%w: %w", errRetired, stoppedError(errFencedWrite))
	require.ErrorIs(t, err, actors.ErrAgentStopped)
	require.ErrorIs(t, err, journal.ErrConflict)
}
