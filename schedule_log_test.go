package lazarus_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
)

// TestScheduleScopeLoaderFailureLogNamesTheConversation: when
// Options.ScopeLoader fails for a schedule's author at fire time, the
// occurrence wakes its conversation under the system scope, and the
// warning saying so names the conversation, not only the schedule (a
// schedule id is unique only within its conversation).
func TestScheduleScopeLoaderFailureLogNamesTheConversation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	logged := &lockedBuffer{}
	logger := slog.New(slog.NewJSONHandler(logged, nil))
	loader := func(context.Context, agent.Identity) (agent.Scope, error) {
		return agent.Scope{}, errors.New("directory down")
	}
	alice := agent.Scope{UserID: "alice"}
	rt, model, clock := scheduleConversation(ctx, t, lazarus.Options{ScopeLoader: loader, Logger: logger}, alice)
	_, err := rt.Schedule(ctx, "c", lazarus.ScheduleSpec{ID: "s", After: 10 * time.Minute, Text: "remind me"}, alice)
	require.NoError(t, err)
	advanceWhenArmed(t, clock, schedT0.Add(10*time.Minute))
	require.NoError(t, model.WaitCalls(ctx, "c", 2), "the wake runs, under the system scope")

	var found bool
	for _, line := range strings.Split(strings.TrimSpace(logged.String()), "\n") {
		if strings.Contains(line, "loading the author's scope failed") {
			found = true
			require.Contains(t, line, `"conversation":"c"`, "the warning names its conversation: %s", line)
			require.Contains(t, line, `"schedule":"s"`)
		}
	}
	require.True(t, found, "the failure is logged: %s", logged.String())
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
