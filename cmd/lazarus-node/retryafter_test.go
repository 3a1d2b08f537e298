package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/server"
)

// TestControlAPIRetryAfter: a failed control call carries a Retry-After
// header as the package doc says, as lazarus serve answers the same
// conditions: 5 s on 429 too_many_subscriptions, 1 s on 503 unavailable
// and canceled, 2 s on 503 no_owner, and none on 503 closed nor on any
// other answer.
func TestControlAPIRetryAfter(t *testing.T) {
	require.Equal(t, 5, server.RetryAfterTooManySubscriptions, "the package doc's figure")
	require.Equal(t, 1, server.RetryAfterUnavailable, "the package doc's figure")
	for _, c := range []struct {
		err    error
		status int
		code   string
		after  string
	}{
		{fmt.Errorf("send: %w", lazarus.ErrClosed), http.StatusServiceUnavailable, "closed", ""},
		{fmt.Errorf("send: %w: %w", lazarus.ErrNoOwner, context.DeadlineExceeded), http.StatusServiceUnavailable, "no_owner", "2"},
		{fmt.Errorf("send: %w", journal.ErrUnavailable), http.StatusServiceUnavailable, "unavailable", "1"},
		{fmt.Errorf("send: %w", context.Canceled), http.StatusServiceUnavailable, "canceled", "1"},
		{fmt.Errorf("subscribe: %w", lazarus.ErrTooManySubscriptions), http.StatusTooManyRequests, "too_many_subscriptions", "5"},
		{fmt.Errorf("resolve: %w", journal.ErrStale), http.StatusConflict, "stale", ""},
		{fmt.Errorf("send: %w", lazarus.ErrUnknownOutcome), http.StatusGatewayTimeout, "unknown_outcome", ""},
		{errors.New("boom"), http.StatusInternalServerError, "internal", ""},
	} {
		rec := httptest.NewRecorder()
		writeError(rec, c.err)
		require.Equal(t, c.status, rec.Code, "%v", c.err)
		require.Equal(t, c.after, rec.Header().Get("Retry-After"), "%v", c.err)
		var out map[string]string
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out), "%v", c.err)
		require.Equal(t, c.code, out["code"], "%v", c.err)
		require.Equal(t, c.err.Error(), out["error"])
	}
}

// TestControlAPIStreamRefusedWithRetryAfter: a /stream of a conversation
// with its Runtime's MaxSubscriptions open already is 429
// too_many_subscriptions with Retry-After: 5, not a 500 internal; once
// the Runtime is closed a call is 503 closed with no Retry-After.
func TestControlAPIStreamRefusedWithRetryAfter(t *testing.T) {
	rt, base, end := testAPI(t, func(o *lazarus.Options) { o.MaxSubscriptions = 1 })

	status, out := call(t, "POST", base+"/sendwait", `{"conv":"c","text":"hi"}`)
	require.Equal(t, http.StatusOK, status, "%v", out)
	held, err := http.Get(base + "/stream?conv=c&after=0")
	require.NoError(t, err)
	defer held.Body.Close()
	require.Equal(t, http.StatusOK, held.StatusCode, "the one slot, taken before the status is sent")

	res, err := testClient.Get(base + "/stream?conv=c&after=0")
	require.NoError(t, err)
	var body map[string]string
	require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
	res.Body.Close()
	require.Equal(t, http.StatusTooManyRequests, res.StatusCode, "%v", body)
	require.Equal(t, "too_many_subscriptions", body["code"])
	require.Equal(t, strconv.Itoa(server.RetryAfterTooManySubscriptions), res.Header.Get("Retry-After"))

	end()
	require.NoError(t, rt.Close())
	res, err = testClient.Get(base + "/stream?conv=c&after=0")
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
	res.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, "%v", body)
	require.Equal(t, "closed", body["code"])
	require.Empty(t, res.Header.Get("Retry-After"), "closed: the member will not serve again")
}
