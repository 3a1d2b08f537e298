package server_test

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/server"
)

// TestStreamsOverTheCapAre429: a conversation with
// lazarus.Options.MaxSubscriptions streams open refuses one more with 429
// too_many_subscriptions (Retry-After: 5 seconds), while the open ones go on; once one is closed, a
// new stream is served again.
func TestStreamsOverTheCapAre429(t *testing.T) {
	ctx := testContext(t)
	n := startNodeIn(t, "", newScripted(), server.Options{}, func(o *lazarus.Options) { o.MaxSubscriptions = 2 })
	conv := n.create(t, tokAlice, nil)
	first := n.stream(t, ctx, tokAlice, conv.ID, "")
	second := n.stream(t, ctx, tokAlice, conv.ID, "")

	// A third is refused; the answer says when to try again.
	res := n.streamRequest(t, ctx, tokAlice, conv.ID, "", "")
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	status, retryAfter := res.StatusCode, res.Header.Get("Retry-After")
	require.Equal(t, http.StatusTooManyRequests, status, "%s", body)
	require.Equal(t, server.CodeTooManySubscriptions, errorCode(t, body))
	require.Equal(t, fmt.Sprint(server.RetryAfterTooManySubscriptions), retryAfter)
	require.Equal(t, "5", retryAfter, "the documented value")

	// The open streams are untouched.
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice, server.SendMessage{Text: "hi"}, nil)
	first.until(t, "turn_end", "answered")
	second.until(t, "turn_end", "answered")

	// The server's subscription ends once the handler sees its client
	// gone, which it does on its own time: a new stream is served then.
	first.close()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		status, _ := n.tryStream(c, ctx, tokAlice, conv.ID, "", "")
		assert.Equal(c, http.StatusOK, status)
	}, 10*time.Second, 5*time.Millisecond, "a closed stream frees its slot")
}

// TestStreamHeadAtTheCapIs429: a HEAD of the stream gets the status and
// headers a GET would (doc.go): 429 too_many_subscriptions with
// Retry-After while the conversation has MaxSubscriptions streams open,
// and 200 once one has ended; a HEAD holds no slot once answered, so a
// GET right after it is served.
func TestStreamHeadAtTheCapIs429(t *testing.T) {
	ctx := testContext(t)
	n := startNodeIn(t, "", newScripted(), server.Options{}, func(o *lazarus.Options) { o.MaxSubscriptions = 1 })
	conv := n.create(t, tokAlice, nil)
	head := func(t testingT) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, "HEAD", n.srv.URL+"/v1/conversations/"+conv.ID+"/stream", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tokAlice)
		res, err := n.srv.Client().Do(req)
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
		return res
	}

	// Under the cap: 200, and the slot is free again after it.
	res := head(t)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
	open := n.stream(t, ctx, tokAlice, conv.ID, "")

	// At the cap: what a GET gets.
	status, body := n.tryStream(t, ctx, tokAlice, conv.ID, "", "")
	require.Equal(t, http.StatusTooManyRequests, status, "%s", body)
	res = head(t)
	require.Equal(t, http.StatusTooManyRequests, res.StatusCode)
	require.Equal(t, fmt.Sprint(server.RetryAfterTooManySubscriptions), res.Header.Get("Retry-After"))
	require.Equal(t, "application/json", res.Header.Get("Content-Type"))

	open.close()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, http.StatusOK, head(c).StatusCode)
	}, 10*time.Second, 5*time.Millisecond, "a closed stream frees its slot")
	// That HEAD let its slot go before it answered: a GET is served.
	status, body = n.tryStream(t, ctx, tokAlice, conv.ID, "", "")
	require.Equal(t, http.StatusOK, status, "%s", body)
}
