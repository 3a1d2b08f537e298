package scripted_test

// Black-box tests of the package's godoc: each test names the promise it
// checks, and uses only the exported API.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
)

// PushError(conv, nil) is a nil failure: like Push's nil reply, the
// Generate that reaches it answers an empty message instead of panicking.
func TestBBPushErrorNil(t *testing.T) {
	m := scripted.New(scripted.Options{})
	m.PushError("c", nil)
	assert.Equal(t, 1, m.Queued("c"))
	msg, err := m.Generate(context.Background(), agent.Turn{ConversationID: "c"}, nil)
	require.NoError(t, err)
	require.NotNil(t, msg)
	assert.Empty(t, msg.GetContent())
	assert.Equal(t, scripted.ModelName, msg.GetModel())
}

// Push: a nil reply is an empty message, with Model set to ModelName.
func TestBBPushNil(t *testing.T) {
	m := scripted.New(scripted.Options{})
	m.Push("c", nil)
	msg, err := m.Generate(context.Background(), agent.Turn{ConversationID: "c"}, nil)
	require.NoError(t, err)
	assert.Empty(t, msg.GetContent())
	assert.Equal(t, scripted.ModelName, msg.GetModel())
}

// Options.Default: called without the lock held (it may call the Model
// back), its error is returned, a nil answer is an empty message.
func TestBBDefault(t *testing.T) {
	boom := errors.New("boom")
	var m *scripted.Model
	m = scripted.New(scripted.Options{Default: func(conv string, _ agent.Turn) (*messages.AssistantMessage, error) {
		if m.Calls(conv) == 2 { // the lock is not held: this would deadlock otherwise
			return nil, boom
		}
		return nil, nil
	}})
	msg, err := m.Generate(context.Background(), agent.Turn{ConversationID: "c"}, nil)
	require.NoError(t, err)
	assert.Empty(t, msg.GetContent())
	_, err = m.Generate(context.Background(), agent.Turn{ConversationID: "c"}, nil)
	require.ErrorIs(t, err, boom)
	assert.Equal(t, 2, m.Calls("c"))
	assert.Len(t, m.Turns("c"), 2)
}

// Generate with ctx already done: ctx.Err(), the queued reply (or error)
// stays queued, and the call is counted and its turn recorded.
func TestBBCancelledKeepsQueue(t *testing.T) {
	m := scripted.New(scripted.Options{Think: time.Hour})
	m.PushError("c", errors.New("later"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := m.Generate(ctx, agent.Turn{ConversationID: "c"}, nil)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 1, m.Queued("c"))
	assert.Equal(t, 1, m.Calls("c"))
	assert.Len(t, m.Turns("c"), 1)
}

// Chunk: deltas of Chunk runes (not bytes), concatenating to the text;
// Chunk < 0 streams each part whole.
func TestBBChunkRunes(t *testing.T) {
	for _, tc := range []struct {
		chunk int
		want  []string
	}{{2, []string{"éé", "é"}}, {-3, []string{"ééé"}}} {
		m := scripted.New(scripted.Options{Chunk: tc.chunk})
		m.Push("c", scripted.Text("ééé"))
		var got []string
		_, err := m.Generate(context.Background(), agent.Turn{ConversationID: "c"}, func(s string) { got = append(got, s) })
		require.NoError(t, err)
		assert.Equal(t, tc.want, got)
	}
}

// Release without a hold does nothing; WaitCalls(n <= 0) returns at once;
// an unknown conversation has nothing queued and no turns.
func TestBBZeroValues(t *testing.T) {
	m := scripted.New(scripted.Options{})
	m.Release("none")
	require.NoError(t, m.WaitCalls(context.Background(), "none", 0))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, m.WaitCalls(ctx, "none", 1), context.Canceled)
	assert.Zero(t, m.Queued("none"))
	assert.Empty(t, m.Turns("none"))
	assert.Nil(t, m.Entered("none"))
	msg, err := m.Generate(context.Background(), agent.Turn{}, nil)
	require.NoError(t, err)
	assert.Equal(t, scripted.DefaultReply, msg.GetContent()[0].GetText())
}
