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
