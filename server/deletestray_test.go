package server_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/server"
)

// TestDeleteRecordsWithoutARow: records stored under an id without a
// conversation row (metadata a creation left behind when it failed
// part-way) are deleted by DELETE /v1/conversations/{id}, 204, for an
// operator and for the owner the metadata names, as Runtime.Delete does;
// anyone else gets the 404 of an unknown id and nothing is deleted. An id
// with nothing stored stays 404, for operators too.
func TestDeleteRecordsWithoutARow(t *testing.T) {
	ctx := testContext(t)
	n := startNode(t, newScripted(), server.Options{})
	st := n.rt.Store()
	stray := func(id string, md map[string]string) string {
		t.Helper()
		require.NoError(t, st.PutMetadata(ctx, id, md))
		_, err := st.Conversation(ctx, id)
		require.ErrorIs(t, err, journal.ErrNotFound)
		return "/v1/conversations/" + id
	}
	gone := func(id string) {
		t.Helper()
		_, err := st.Conversation(ctx, id)
		require.ErrorIs(t, err, journal.ErrDeleted)
		// The metadata went with it (a Store may say deleted, or empty).
		md, err := st.Metadata(ctx, id)
		if err != nil {
			require.ErrorIs(t, err, journal.ErrDeleted)
		}
		require.Empty(t, md)
	}

	// Alice's leftovers: bob, and an approver, learn nothing and delete
	// nothing; alice deletes them.
	path := stray("c-left-by-alice", map[string]string{server.OwnerKey: "alice", "topic": "x"})
	for _, tok := range []string{tokBob, tokCarol} {
		status, out := n.call(t, "DELETE", path, tok, nil)
		requireError(t, status, out, http.StatusNotFound, server.CodeNotFound)
	}
	md, err := st.Metadata(ctx, "c-left-by-alice")
	require.NoError(t, err)
	require.Equal(t, "alice", md[server.OwnerKey])
	n.must(t, http.StatusNoContent, "DELETE", path, tokAlice, nil, nil)
	gone("c-left-by-alice")
	// Deleted: the former owner gets 404, an operator 410.
	status, out := n.call(t, "DELETE", path, tokAlice, nil)
	requireError(t, status, out, http.StatusNotFound, server.CodeNotFound)
	status, out = n.call(t, "DELETE", path, tokOlga, nil)
	requireError(t, status, out, http.StatusGone, server.CodeDeleted)

	// An operator deletes a user's leftovers, and ownerless ones, which
	// no user may.
	path = stray("c-left-by-bob", map[string]string{server.OwnerKey: "bob"})
	n.must(t, http.StatusNoContent, "DELETE", path, tokOlga, nil, nil)
	gone("c-left-by-bob")
	path = stray("c-ownerless", map[string]string{"topic": "y"})
	for _, tok := range []string{tokAlice, tokBob} {
		status, out := n.call(t, "DELETE", path, tok, nil)
		requireError(t, status, out, http.StatusNotFound, server.CodeNotFound)
	}
	n.must(t, http.StatusNoContent, "DELETE", path, tokOlga, nil, nil)
	gone("c-ownerless")

	// Nothing stored: 404 for everyone, and no tombstone.
	for _, tok := range []string{tokOlga, tokAlice} {
		status, out := n.call(t, "DELETE", "/v1/conversations/c-nothing-here", tok, nil)
		requireError(t, status, out, http.StatusNotFound, server.CodeNotFound)
	}
	_, err = st.Conversation(ctx, "c-nothing-here")
	require.ErrorIs(t, err, journal.ErrNotFound)
}
