package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// cutStore is a Store whose read of the row blockID, whose listing of
// pending calls and whose metadata writes wait for their context to end, as a database call cut by its
// client's disconnect, and fail then as pgjournal does: a read with the
// context's error, a write whose COMMIT may have been sent with
// journal.ErrUnknownOutcome and the context's error. entered gets a value
// once a call waits.
type cutStore struct {
	journal.Store
	blockID string
	entered chan struct{}
}

func (s *cutStore) wait(ctx context.Context) {
	s.entered <- struct{}{}
	<-ctx.Done()
}

func (s *cutStore) Conversation(ctx context.Context, id string) (*messages.Conversation, error) {
	if id != s.blockID {
		return s.Store.Conversation(ctx, id)
	}
	s.wait(ctx)
	return nil, fmt.Errorf("pgjournal: conversation: %w", ctx.Err())
}

func (s *cutStore) ListPendingToolCalls(ctx context.Context, cursor string, limit int) ([]*messages.ToolCallRecord, string, error) {
	s.wait(ctx)
	return nil, "", fmt.Errorf("pgjournal: list pending: %w", ctx.Err())
}

func (s *cutStore) PutMetadata(ctx context.Context, id string, md map[string]string) error {
	s.wait(ctx)
	return fmt.Errorf("pgjournal: put metadata: %w: %w", journal.ErrUnknownOutcome, ctx.Err())
}

// TestClientDisconnectIsNotAServerFailure: a request whose client went
// away while its Store call ran gets the status of its outcome (503
// unavailable for a read, 504 unknown_outcome for a write that may have
// landed; /readyz its 503), and the server logs it as the client's doing
// (debug), not as a failure of its own (a warning, as a Store that fails
// is).
func TestClientDisconnectIsNotAServerFailure(t *testing.T) {
	st := &cutStore{Store: memjournal.New(memjournal.Options{}), blockID: "c-block", entered: make(chan struct{}, 1)}
	var logs syncBuffer
	n := startNodeIn(t, "", newScripted(), server.Options{
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}, func(o *lazarus.Options) { o.Store = st })
	h := *n.served.Load()

	for _, tc := range []struct {
		method, path, token, body string
		status                    int
		code                      string
	}{
		{"GET", "/v1/conversations/c-block", tokOlga, "", http.StatusServiceUnavailable, server.CodeUnavailable},
		{"POST", "/v1/conversations", tokAlice, `{}`, http.StatusGatewayTimeout, server.CodeUnknownOutcome},
		{"GET", "/readyz", "", "", http.StatusServiceUnavailable, server.CodeUnavailable},
	} {
		ctx, cancel := context.WithCancel(testContext(t))
		req := httptest.NewRequestWithContext(ctx, tc.method, tc.path, strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer "+tc.token)
		rec := httptest.NewRecorder()
		done := make(chan struct{})
		go func() {
			defer close(done)
			h.ServeHTTP(rec, req)
		}()
		<-st.entered
		cancel() // the client goes away
		<-done
		require.Equal(t, tc.status, rec.Code, "%s %s: %s", tc.method, tc.path, rec.Body)
		require.Equal(t, tc.code, errorCode(t, rec.Body.Bytes()), "%s %s", tc.method, tc.path)
	}
	out := logs.String()
	require.Contains(t, out, "request ended by its client", "logged, at debug level")
	require.NotContains(t, out, "level=WARN", "a client's disconnect is no failure of the server")
}
