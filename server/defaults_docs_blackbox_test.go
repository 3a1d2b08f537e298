package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/server"
)

// TestDocsBodyLimitDefault: Options.MaxBodyBytes left zero, or negative,
// is DefaultMaxBodyBytes: a body of one byte more is 413 too_large and
// writes nothing, one of exactly that many is read (and then refused for
// its content, a message larger than an event may be, not for its size).
func TestDocsBodyLimitDefault(t *testing.T) {
	for _, max := range []int64{0, -1} {
		ctx := testContext(t)
		n := startNode(t, newScripted(), server.Options{MaxBodyBytes: max})
		conv := n.create(t, tokAlice, nil)
		path := "/v1/conversations/" + conv.ID + "/messages"
		body := func(size int) string {
			return `{"text":"` + strings.Repeat("x", size-len(`{"text":""}`)) + `"}`
		}
		status, out := n.call(t, "POST", path, tokAlice, body(server.DefaultMaxBodyBytes+1))
		requireError(t, status, out, http.StatusRequestEntityTooLarge, server.CodeTooLarge)
		require.Zero(t, n.lastSeq(t, ctx, conv.ID))
		status, out = n.call(t, "POST", path, tokAlice, body(server.DefaultMaxBodyBytes))
		require.NotEqual(t, http.StatusRequestEntityTooLarge, status, "MaxBodyBytes %d: a body of DefaultMaxBodyBytes is read: %s", max, out)
	}
}
