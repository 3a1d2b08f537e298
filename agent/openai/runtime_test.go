package openai_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/openai"
	"github.com/lazarusrt/lazarus/agent/providertest"
)

// TestKillDuringStreamingRerunsTheTurnOnce drives a Runtime on the OpenAI
// provider: the first call streams "Partial" and then hangs; the
// conversation is killed and woken; the revival re-runs the turn once (a
// second request), its deltas reach the subscriber, and the log holds
// exactly one assistant answer, the second call's. The first call's
// request ends (its context is cancelled by the kill).
func TestKillDuringStreamingRerunsTheTurnOnce(t *testing.T) {
	full, err := providertest.Load("testdata/text.txt")
	require.NoError(t, err)
	var calls atomic.Int32
	firstGone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch calls.Add(1) {
		case 1:
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte(`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Partial"},"finish_reason":null}]}` + "\n\n"))
			w.(http.Flusher).Flush()
			<-r.Context().Done() // the kill cancels the call
			close(firstGone)
		case 2:
			providertest.Write(w, full[0])
		default:
			t.Errorf("unexpected request %d", calls.Load())
			http.Error(w, "no", http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	model, err := openai.New(openai.Options{Model: "gpt-4o-mini", BaseURL: srv.URL, APIKey: "k"})
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
	killed := false
	var answer string
	for answer == "" {
		var u = <-updates
		require.NoError(t, ctx.Err())
		require.NoError(t, u.Err)
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
			after = append(after, u.Delta)
		case u.Event.GetAssistantMsg() != nil:
			for _, p := range u.Event.GetAssistantMsg().GetContent() {
				answer += p.GetText()
			}
			assert.Equal(t, int64(12), u.Event.GetAssistantMsg().GetUsage().GetInputTokens())
		}
	}
	assert.Equal(t, []string{"Partial"}, before)
	assert.Equal(t, "Hello, world!", strings.Join(after, ""), "the re-run's deltas, and only them")
	assert.Equal(t, "Hello, world!", answer)
	assert.Equal(t, int32(2), calls.Load(), "the turn ran once more, not twice")

	hist, err := rt.History(ctx, "c", 0, 100)
	require.NoError(t, err)
	answers := 0
	for _, ev := range hist {
		if ev.GetAssistantMsg() != nil {
			answers++
		}
	}
	assert.Equal(t, 1, answers, "exactly one assistant answer in the log")
}

// TestBrokenStreamRerunsTheTurnClean drives a Runtime on the provider: the
// first call streams text and its connection drops (the transcript
// reset_mid_stream: agent.ErrInterrupted); the runtime's policy retries the
// call, which answers (text). Subscribers see the broken call's deltas, a
// retry update with the error, then the new call's deltas; the log holds
// the user message and exactly one assistant answer, the new call's, with
// nothing of the broken one.
func TestBrokenStreamRerunsTheTurnClean(t *testing.T) {
	broken, err := providertest.Load("testdata/reset_mid_stream.txt")
	require.NoError(t, err)
	full, err := providertest.Load("testdata/text.txt")
	require.NoError(t, err)
	srv := providertest.Serve(t, append(broken, full...))
	model, err := openai.New(openai.Options{Model: "gpt-4o-mini", BaseURL: srv.URL, APIKey: "k"})
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
		var u = <-updates
		require.NoError(t, ctx.Err())
		switch {
		case u.Retry != nil:
			require.ErrorIs(t, u.Err, agent.ErrInterrupted)
			require.False(t, retried, "one retry")
			retried = true
		case u.Err != nil:
			t.Fatalf("update with an error and no retry: %v", u.Err)
		case u.Delta != "" && !retried:
			before = append(before, u.Delta)
		case u.Delta != "":
			after = append(after, u.Delta)
		case u.Event.GetAssistantMsg() != nil:
			for _, p := range u.Event.GetAssistantMsg().GetContent() {
				answer += p.GetText()
			}
		}
	}
	assert.NotEmpty(t, before, "the broken call streamed")
	assert.Equal(t, "Hello, world!", strings.Join(after, ""))
	assert.Equal(t, "Hello, world!", answer)
	assert.Len(t, srv.Requests(), 2)

	hist, err := rt.History(ctx, "c", 0, 100)
	require.NoError(t, err)
	var kinds []string
	for _, ev := range hist {
		switch {
		case ev.GetUserMsg() != nil:
			kinds = append(kinds, "user")
		case ev.GetAssistantMsg() != nil:
			kinds = append(kinds, "assistant")
			assert.Equal(t, "Hello, world!", openai.Text(ev.GetAssistantMsg().GetContent()))
		default:
			kinds = append(kinds, "other")
		}
	}
	assert.Equal(t, []string{"user", "assistant"}, kinds, "the log holds one answer and nothing of the broken call")
}
