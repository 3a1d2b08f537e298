package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/server"
)

// TestOpenAPIDocumentsAnAnswerToACallDeletedMeanwhile: a resolve or a
// reject whose conversation is deleted between the server's check of the
// call and the Runtime's answer is answered 409 stale (the answer's write
// meets the tombstone: the call went with the conversation) or, with a
// tool whose authorizer reads the conversation (its metadata: ErrDeleted
// once it is deleted), 410 deleted, the authorizer's error; each a status
// the OpenAPI document lists for both (410 was not listed).
func TestOpenAPIDocumentsAnAnswerToACallDeletedMeanwhile(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(server.OpenAPI(), &doc))
	for _, c := range []struct {
		op     string
		body   any
		reads  bool // the authorizer reads the conversation
		status int
		code   string
	}{
		{"resolve", server.Resolve{Result: json.RawMessage(`{"approved":true}`)}, true, http.StatusGone, server.CodeDeleted},
		{"reject", server.Reject{Reason: "no"}, true, http.StatusGone, server.CodeDeleted},
		{"resolve", server.Resolve{Result: json.RawMessage(`{"approved":true}`)}, false, http.StatusConflict, server.CodeStale},
		{"reject", server.Reject{Reason: "no"}, false, http.StatusConflict, server.CodeStale},
	} {
		t.Run(fmt.Sprintf("%s/reads=%t", c.op, c.reads), func(t *testing.T) {
			ctx := testContext(t)
			model := newScripted()
			var rt atomic.Pointer[lazarus.Runtime]
			var armed atomic.Bool
			var seen atomic.Int32
			n := startNodeIn(t, "", model, server.Options{}, func(o *lazarus.Options) {
				requireRole := o.Tools[0].Authorizer
				o.Tools[0].Authorizer = func(ctx context.Context, a agent.Authorization) error {
					if err := requireRole(ctx, a); err != nil {
						return err
					}
					if armed.Load() && seen.Add(1) == 2 {
						// The server checked the call (the first
						// authorization); the Runtime's own comes next.
						if err := rt.Load().Delete(ctx, a.ConversationID); err != nil {
							return err
						}
					}
					if !c.reads {
						return nil
					}
					_, err := rt.Load().Metadata(ctx, a.ConversationID)
					return err
				}
			})
			rt.Store(n.rt)
			_, call := suspendOnApproval(t, ctx, n, model)
			armed.Store(true)

			path := "/v1/calls/{id}/" + c.op
			status, out := n.call(t, http.MethodPost, "/v1/calls/"+call.ID+"/"+c.op, tokCarol, c.body)
			require.Equal(t, c.status, status, "%.300s", out)
			require.Equal(t, c.code, errorCode(t, out))
			require.Equal(t, int32(2), seen.Load(), "the deletion came between the server's check and the Runtime's")
			var op struct {
				Responses map[string]json.RawMessage `json:"responses"`
			}
			require.NoError(t, json.Unmarshal(doc.Paths[path]["post"], &op))
			_, ok := op.Responses[strconv.Itoa(status)]
			require.True(t, ok, "POST %s: %d is not documented", path, status)
		})
	}
}
