package server_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// secretDetail is what the failing Store's errors say that a client must
// not read: a file of the store, a database's address and user.
const secretDetail = "/var/lib/lazarus/000123.sst host=10.1.2.3 user=lazarus_admin"

// failingStore is a Store whose reads of one conversation row fail with
// errors naming secretDetail, and whose pending-call index fails so once
// down is set, or times out once slow is set.
type failingStore struct {
	journal.Store
	corrupt, unavailable string
	down                 atomic.Bool
	slow                 atomic.Bool
}

func (s *failingStore) Conversation(ctx context.Context, id string) (*messages.Conversation, error) {
	switch id {
	case s.corrupt:
		return nil, fmt.Errorf("pebble: %s: checksum mismatch: %w", secretDetail, journal.ErrCorrupt)
	case s.unavailable:
		return nil, fmt.Errorf("pgjournal: conversation: %w: failed to connect to %s", journal.ErrUnavailable, secretDetail)
	}
	return s.Store.Conversation(ctx, id)
}

func (s *failingStore) ListPendingToolCalls(ctx context.Context, cursor string, limit int) ([]*messages.ToolCallRecord, string, error) {
	if s.slow.Load() {
		return nil, "", fmt.Errorf("pgjournal: list pending: %w", context.DeadlineExceeded)
	}
	if s.down.Load() {
		return nil, "", fmt.Errorf("pgjournal: list pending: %w: failed to connect to %s", journal.ErrUnavailable, secretDetail)
	}
	return s.Store.ListPendingToolCalls(ctx, cursor, limit)
}

// syncBuffer is a bytes.Buffer safe for the server's concurrent logs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestServerErrorsNameNoInternals: a 5xx answers its code with a message
// of the code, not the Go error, which may name the store's files or the
// database's address (and /readyz answers anyone); the server logs the
// error whole. A 4xx keeps its message, which speaks of the request.
func TestServerErrorsNameNoInternals(t *testing.T) {
	st := &failingStore{Store: memjournal.New(memjournal.Options{}), corrupt: "c-corrupt", unavailable: "c-unavailable"}
	var logs syncBuffer
	n := startNodeIn(t, "", newScripted(), server.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		func(o *lazarus.Options) { o.Store = st })

	for _, tc := range []struct {
		path   string
		status int
		code   string
	}{
		{"/v1/conversations/c-corrupt", http.StatusInternalServerError, server.CodeInternal},
		{"/v1/conversations/c-unavailable", http.StatusServiceUnavailable, server.CodeUnavailable},
	} {
		status, body := n.call(t, "GET", tc.path, tokOlga, nil)
		require.Equal(t, tc.status, status, "%s", body)
		require.Equal(t, tc.code, errorCode(t, body))
		require.NotContains(t, string(body), "10.1.2.3", "GET %s", tc.path)
		require.NotContains(t, string(body), ".sst", "GET %s", tc.path)
	}

	st.down.Store(true)
	status, body := n.call(t, "GET", "/readyz", "", nil)
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Equal(t, server.CodeUnavailable, errorCode(t, body))
	require.NotContains(t, string(body), "10.1.2.3")

	require.Contains(t, logs.String(), "000123.sst", "the server logs what it does not answer")

	status, body = n.call(t, "GET", "/v1/conversations/c-x/events?view=nope", tokOlga, nil)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, string(body), `view \"nope\"`, "a 4xx says what was wrong with the request")
}

// TestReadyzIsServiceUnavailable: /readyz answers 503, as documented,
// whatever failed: a Store that timed out too (a 504 elsewhere), with the
// code of the failure.
func TestReadyzIsServiceUnavailable(t *testing.T) {
	st := &failingStore{Store: memjournal.New(memjournal.Options{})}
	n := startNodeIn(t, "", newScripted(), server.Options{}, func(o *lazarus.Options) { o.Store = st })
	n.must(t, http.StatusOK, "GET", "/readyz", "", nil, nil)
	st.slow.Store(true)
	status, body := n.call(t, "GET", "/readyz", "", nil)
	require.Equal(t, http.StatusServiceUnavailable, status, "%s", body)
	require.Equal(t, server.CodeTimeout, errorCode(t, body))
	st.slow.Store(false)
	n.must(t, http.StatusOK, "GET", "/readyz", "", nil, nil)
}

// TestErrorMessagesAreBounded: a bad request that quotes what it sent (a
// duration, a time, an unknown field, a metadata key, a query parameter)
// gets a 400 whose message is cut, not one the size of the request; and
// nothing is written.
func TestErrorMessagesAreBounded(t *testing.T) {
	n := startNode(t, newScripted(), server.Options{})
	conv := n.create(t, tokAlice, nil)
	base := "/v1/conversations/" + conv.ID
	big := strings.Repeat("x", 200000)
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"POST", base + "/schedules", `{"after":"` + big + `","text":"x"}`},
		{"POST", base + "/schedules", `{"every":"` + big + `","text":"x"}`},
		{"POST", base + "/schedules", `{"at":"` + big + `","text":"x"}`},
		{"POST", "/v1/conversations", `{"` + big + `":1}`},
		{"POST", "/v1/conversations", `{"metadata":{"lazarus.` + big + `":"v"}}`},
		{"POST", "/v1/conversations", `{"metadata":{"` + big + `":""}}`},
		{"POST", base + "/fork", `{"at_seq":1,"metadata":{"lazarus.` + big + `":"v"}}`},
		{"GET", base + "/events?agent=" + big, nil},
		{"GET", base + "/events?view=" + big, nil},
		{"GET", base + "/stream?agent=" + big, nil},
		{"GET", "/v1/conversations?metadata[" + big + "=v", nil},
	} {
		status, body := n.call(t, c.method, c.path, tokAlice, c.body)
		require.Equal(t, http.StatusBadRequest, status, "%s %.80s: %.200s", c.method, c.path, body)
		require.Equal(t, server.CodeInvalid, errorCode(t, body))
		require.Less(t, len(body), 2048, "%s %.80s: an answer of the request's size", c.method, c.path)
		requireSentinelTextOnce(t, body, fmt.Sprintf("%s %.80s", c.method, c.path))
	}
	var list server.ConversationList
	n.must(t, http.StatusOK, "GET", "/v1/conversations", tokOlga, nil, &list)
	require.Len(t, list.Conversations, 1, "a bad request created a conversation")
	var scs server.ScheduleList
	n.must(t, http.StatusOK, "GET", base+"/schedules", tokAlice, nil, &scs)
	require.Empty(t, scs.Schedules)
}
