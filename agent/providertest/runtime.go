package providertest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
)

// RuntimeCase describes a provider to RunRuntime.
type RuntimeCase struct {
	// Dir holds the provider's transcripts: text.txt (an answer
	// "Hello, world!" with 12 input tokens) and reset_mid_stream.txt (text,
	// then the connection drops).
	Dir string
	// New returns the provider's Model talking to baseURL.
	New func(baseURL string) (agent.Model, error)
	// Partial writes the start of a streamed answer whose only text so far
	// is "Partial", in the provider's wire format, headers included.
	Partial func(w http.ResponseWriter)
}

// RunRuntime drives a Runtime on the provider through the turns a kill or a
// broken stream interrupts:
//
//   - KillDuringStreamingRerunsTheTurnOnce: the first call streams
//     "Partial" and hangs; the conversation is killed and woken; the killed
//     call's request ends, the turn is re-run once (a second request), its
//     deltas reach the subscriber after a Restart, and the log holds
//     exactly one assistant answer, the second call's;
//   - BrokenStreamRerunsTheTurnClean: the first call's connection drops
//     after text (agent.ErrInterrupted); the runtime's policy retries it;
//     subscribers see the broken call's deltas, a retry update with the
//     error, then the new call's deltas; the log holds the user message and
//     one answer, with nothing of the broken call.
func RunRuntime(t *testing.T, c RuntimeCase) {
	t.Run("KillDuringStreamingRerunsTheTurnOnce", func(t *testing.T) { killDuringStreaming(t, c) })
	t.Run("BrokenStreamRerunsTheTurnClean", func(t *testing.T) { brokenStream(t, c) })
}

func killDuringStreaming(t *testing.T, c RuntimeCase) {
	full, err := Load(filepath.Join(c.Dir, "text.txt"))
	require.NoError(t, err)
	var calls atomic.Int32
	firstGone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch calls.Add(1) {
		case 1:
			c.Partial(w)
			w.(http.Flusher).Flush()
			<-r.Context().Done() // the kill cancels the call
			close(firstGone)
		case 2:
			Write(w, full[0])
		default:
			t.Errorf("unexpected request %d", calls.Load())
			http.Error(w, "no", http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	model, err := c.New(srv.URL)
	require.NoError(t, err)
	rt, err := lazarus.Open(lazarus.Options{Model: model})
	require.NoError(t, err)
	defer rt.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	updates, err := rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	_, err = rt.Send(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)

	var before, after []string
	killed, restarted := false, false
	var answer string
	for answer == "" {
		u := <-updates
		require.NoError(t, ctx.Err())
		require.NoError(t, u.Err)
		restarted = restarted || u.Restart
		switch {
		case u.Delta != "" && !killed:
			before = append(before, u.Delta)
			killed = true
			require.True(t, rt.Kill("c"))
			select {
			case <-firstGone:
			case <-ctx.Done():
				t.Fatal("the killed call's request did not end")
			}
			require.NoError(t, rt.Wake(ctx, "c"))
		case u.Delta != "":
			require.True(t, restarted, "a Restart before the re-run's deltas")
			after = append(after, u.Delta)
		case u.Event.GetAssistantMsg() != nil:
			answer = text(u.Event.GetAssistantMsg())
			assert.Equal(t, int64(12), u.Event.GetAssistantMsg().GetUsage().GetInputTokens())
		}
	}
	assert.Equal(t, []string{"Partial"}, before)
	assert.Equal(t, "Hello, world!", strings.Join(after, ""), "the re-run's deltas, and only them")
	assert.Equal(t, "Hello, world!", answer)
	assert.Equal(t, int32(2), calls.Load(), "the turn ran once more, not twice")
	assert.Equal(t, []string{"user", "assistant"}, kinds(ctx, t, rt), "exactly one assistant answer in the log")
}

func brokenStream(t *testing.T, c RuntimeCase) {
	broken, err := Load(filepath.Join(c.Dir, "reset_mid_stream.txt"))
	require.NoError(t, err)
	full, err := Load(filepath.Join(c.Dir, "text.txt"))
	require.NoError(t, err)
	srv := Serve(t, append(broken, full...))
	model, err := c.New(srv.URL)
	require.NoError(t, err)
	rt, err := lazarus.Open(lazarus.Options{Model: model, ModelRetry: lazarus.RetryPolicy{InitialInterval: time.Millisecond}})
	require.NoError(t, err)
	defer rt.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	updates, err := rt.Subscribe(ctx, "c", 0)
	require.NoError(t, err)
	_, err = rt.Send(ctx, "c", "hi", agent.Scope{UserID: "u"})
	require.NoError(t, err)

	var before, after []string
	retried := false
	var answer string
	for answer == "" {
		u := <-updates
		require.NoError(t, ctx.Err())
		switch {
		case u.Retry != nil:
			require.ErrorIs(t, u.Err, agent.ErrInterrupted)
			require.False(t, retried, "one retry")
			require.True(t, u.Restart, "the broken call's deltas are void")
			retried = true
		case u.Err != nil:
			t.Fatalf("update with an error and no retry: %v", u.Err)
		case u.Delta != "" && !retried:
			before = append(before, u.Delta)
		case u.Delta != "":
			after = append(after, u.Delta)
		case u.Event.GetAssistantMsg() != nil:
			answer = text(u.Event.GetAssistantMsg())
		}
	}
	assert.NotEmpty(t, before, "the broken call streamed")
	assert.Equal(t, "Hello, world!", strings.Join(after, ""))
	assert.Equal(t, "Hello, world!", answer)
	assert.Len(t, srv.Requests(), 2)
	assert.Equal(t, []string{"user", "assistant"}, kinds(ctx, t, rt), "the log holds one answer and nothing of the broken call")
}

func text(m *messages.AssistantMessage) string {
	var b strings.Builder
	for _, p := range m.GetContent() {
		b.WriteString(p.GetText())
	}
	return b.String()
}

// kinds lists the kinds of the events of conversation "c".
func kinds(ctx context.Context, t *testing.T, rt *lazarus.Runtime) []string {
	t.Helper()
	hist, err := rt.History(ctx, "c", 0, 100)
	require.NoError(t, err)
	var out []string
	for _, ev := range hist {
		switch {
		case ev.GetUserMsg() != nil:
			out = append(out, "user")
		case ev.GetAssistantMsg() != nil:
			out = append(out, "assistant")
			assert.Equal(t, "Hello, world!", text(ev.GetAssistantMsg()))
		default:
			out = append(out, "other")
		}
	}
	return out
}
