package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// timingOutStore is a Store whose reads of conversations, metadata and
// tool calls time out once slow is set, as a database's statement timeout.
type timingOutStore struct {
	journal.Store
	slow atomic.Bool
}

func (s *timingOutStore) timeout(what string) error {
	return fmt.Errorf("pgjournal: %s: %w", what, context.DeadlineExceeded)
}

func (s *timingOutStore) Conversation(ctx context.Context, id string) (*messages.Conversation, error) {
	if s.slow.Load() {
		return nil, s.timeout("conversation")
	}
	return s.Store.Conversation(ctx, id)
}

func (s *timingOutStore) ListConversations(ctx context.Context, cursor string, limit int) ([]*messages.Conversation, string, error) {
	if s.slow.Load() {
		return nil, "", s.timeout("list conversations")
	}
	return s.Store.ListConversations(ctx, cursor, limit)
}

func (s *timingOutStore) Metadata(ctx context.Context, id string) (map[string]string, error) {
	if s.slow.Load() {
		return nil, s.timeout("metadata")
	}
	return s.Store.Metadata(ctx, id)
}

func (s *timingOutStore) ToolCall(ctx context.Context, id string) (*messages.ToolCallRecord, error) {
	if s.slow.Load() {
		return nil, s.timeout("tool call")
	}
	return s.Store.ToolCall(ctx, id)
}

func (s *timingOutStore) ListPendingToolCalls(ctx context.Context, cursor string, limit int) ([]*messages.ToolCallRecord, string, error) {
	if s.slow.Load() {
		return nil, "", s.timeout("list pending")
	}
	return s.Store.ListPendingToolCalls(ctx, cursor, limit)
}

// TestOpenAPIDocumentsAStoreTimeout: every GET of the OpenAPI document,
// called by the owner of a real conversation and call (the approver for
// the call) while the Store's reads time out, answers a status the
// document lists for it: a read too is 504 timeout, as the package
// documentation's table says of context.DeadlineExceeded (and /readyz its
// 503). The writes document their 504 already.
func TestOpenAPIDocumentsAStoreTimeout(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	st := &timingOutStore{Store: memjournal.New(memjournal.Options{})}
	n := startNodeIn(t, "", model, server.Options{}, func(o *lazarus.Options) { o.Store = st })
	conv, call := suspendOnApproval(t, ctx, n, model)

	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(server.OpenAPI(), &doc))
	st.slow.Store(true)
	calls, timeouts := 0, 0
	for path, item := range doc.Paths {
		for method, raw := range item {
			if method != "get" {
				continue
			}
			var op struct {
				Responses map[string]json.RawMessage `json:"responses"`
			}
			require.NoError(t, json.Unmarshal(raw, &op))
			method = strings.ToUpper(method)
			p := path
			if strings.HasPrefix(p, "/v1/calls/") {
				p = strings.Replace(p, "{id}", call.ID, 1)
			}
			p = strings.Replace(strings.Replace(p, "{id}", conv.ID, 1), "{schedule}", "none", 1)
			token := tokCarol // the approver, who may answer the call
			if !strings.HasPrefix(p, "/v1/calls") {
				token = tokAlice
			}
			if path == "/metrics" {
				token = tokOlga
			}
			status, out := n.call(t, method, p, token, nil)
			calls++
			if status == http.StatusGatewayTimeout {
				timeouts++
				require.Equal(t, server.CodeTimeout, errorCode(t, out), "%s %s", method, path)
			}
			_, ok := op.Responses[strconv.Itoa(status)]
			require.True(t, ok, "%s %s: %d is not documented: %.300s", method, path, status, out)
		}
	}
	require.Greater(t, calls, 8)
	require.Greater(t, timeouts, 6)
}

// TestCreateWhileStoreReadsTimeOutIs504Timeout: a create while the Store's
// reads time out fails in the revival read of the activation Configure
// starts, whose context.DeadlineExceeded crosses the conversation actor's
// reply: it is answered 504 timeout, as the package documentation's table
// says of context.DeadlineExceeded, a status the OpenAPI document lists
// for it, never 500 internal.
func TestCreateWhileStoreReadsTimeOutIs504Timeout(t *testing.T) {
	model := newScripted()
	st := &timingOutStore{Store: memjournal.New(memjournal.Options{})}
	n := startNodeIn(t, "", model, server.Options{}, func(o *lazarus.Options) { o.Store = st })

	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(server.OpenAPI(), &doc))
	var op struct {
		Responses map[string]json.RawMessage `json:"responses"`
	}
	require.NoError(t, json.Unmarshal(doc.Paths["/v1/conversations"]["post"], &op))
	st.slow.Store(true)
	status, out := n.call(t, http.MethodPost, "/v1/conversations", tokAlice, server.CreateConversation{})
	require.Equal(t, http.StatusGatewayTimeout, status, "%.300s", out)
	require.Equal(t, server.CodeTimeout, errorCode(t, out))
	_, ok := op.Responses["504"]
	require.True(t, ok, "POST /v1/conversations: 504 is not documented")
}
