package server

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal"
)

// TestClassifyOrder: an error that wraps several sentinels gets the status
// of the one that says most: an answer to a call that is not pending wraps
// ErrStale and ErrInvalid (lazarus.Runtime.Resolve) and is a 409 stale; a
// fork into an existing id is a 409 conflict.
func TestClassifyOrder(t *testing.T) {
	cases := []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("resolve: %w (%w)", journal.ErrStale, journal.ErrInvalid), http.StatusConflict, CodeStale},
		{journal.ErrStale, http.StatusConflict, CodeStale},
		{journal.Invalidf("bad"), http.StatusBadRequest, CodeInvalid},
		{fmt.Errorf("fork: %w", journal.ErrExists), http.StatusConflict, CodeConflict},
		{fmt.Errorf("send: %w", journal.ErrDeleted), http.StatusGone, CodeDeleted},
		{fmt.Errorf("something else"), http.StatusInternalServerError, CodeInternal},
	}
	for _, tc := range cases {
		status, code := classify(tc.err)
		require.Equal(t, tc.status, status, "%v", tc.err)
		require.Equal(t, tc.code, code, "%v", tc.err)
	}
}
