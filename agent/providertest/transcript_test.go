package providertest_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent/providertest"
)

// TestParse: comment lines (however many) and directives come before the
// body; "===" separates responses; the Content-Type follows the status.
func TestParse(t *testing.T) {
	rs, err := providertest.Parse([]byte("# a 429\n# retried\n> status 429\n> header Retry-After: 2\n{\"error\":{}}\n===\n# ok\n> split 3\n> reset\ndata: x\n\n"))
	require.NoError(t, err)
	require.Len(t, rs, 2)
	assert.Equal(t, http.StatusTooManyRequests, rs[0].Status)
	assert.Equal(t, "2", rs[0].Header.Get("Retry-After"))
	assert.Equal(t, "application/json", rs[0].Header.Get("Content-Type"))
	assert.Equal(t, "{\"error\":{}}", string(rs[0].Body))
	assert.Equal(t, http.StatusOK, rs[1].Status)
	assert.Equal(t, "text/event-stream", rs[1].Header.Get("Content-Type"))
	assert.Equal(t, 3, rs[1].Split)
	assert.True(t, rs[1].Reset)
	assert.Equal(t, "data: x\n\n", string(rs[1].Body))

	_, err = providertest.Parse([]byte("> bogus\n"))
	require.Error(t, err)
}

// Parse refuses a status net/http cannot send (Write would panic in
// WriteHeader, and the client would see a dropped connection instead).
func TestParseRefusesAnUnsendableStatus(t *testing.T) {
	for _, s := range []string{"0", "99", "1000", "-200"} {
		_, err := providertest.Parse([]byte("> status " + s + "\n{}"))
		require.Error(t, err, s)
		assert.Contains(t, err.Error(), "bad status")
	}
	_, err := providertest.Parse([]byte("> status 100\n{}"))
	require.NoError(t, err)
}
