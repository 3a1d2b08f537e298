package providertest_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent/providertest"
)

// TestDocsTranscriptFormat: the package doc's transcript format. A "#"
// line after a directive is body, not a comment; a Content-Type header
// given is kept; a bad status, header or split is an error; the newline
// before "===" belongs to the separator.
func TestDocsTranscriptFormat(t *testing.T) {
	rs, err := providertest.Parse([]byte("> status 200\n> header Content-Type: application/json\n# not a comment\n{}\n===\n> status 503\n{}"))
	require.NoError(t, err)
	require.Len(t, rs, 2)
	assert.Equal(t, "application/json", rs[0].Header.Get("Content-Type"))
	assert.Equal(t, "# not a comment\n{}", string(rs[0].Body))
	assert.Equal(t, http.StatusServiceUnavailable, rs[1].Status)
	assert.Equal(t, "{}", string(rs[1].Body))

	rs, err = providertest.Parse([]byte("data: a\n\n\n===\ndata: b\n\n"))
	require.NoError(t, err)
	require.Len(t, rs, 2)
	assert.Equal(t, "data: a\n\n", string(rs[0].Body), "a stream ending in a blank line before the separator")
	assert.Equal(t, "data: b\n\n", string(rs[1].Body))

	for _, bad := range []string{"> status x\n", "> header nocolon\n", "> split 0\n", "> split -1\n"} {
		_, err := providertest.Parse([]byte(bad))
		assert.Error(t, err, bad)
	}
}

// recordingTB is a testing.TB whose Errorf is recorded, not reported.
type recordingTB struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestDocsServerReplaysInOrder: the n-th request gets the n-th response,
// with its status, headers and body (written in pieces when split); the
// request bodies are kept in order; a request past the last response gets
// a 500 and fails the test; a reset response drops the connection, so the
// client reads an error, not a clean end.
func TestDocsServerReplaysInOrder(t *testing.T) {
	rs, err := providertest.Parse([]byte("> status 429\n> header Retry-After: 2\n{\"e\":1}\n===\n> split 2\ndata: hello\n\n"))
	require.NoError(t, err)
	tb := &recordingTB{TB: t}
	srv := providertest.Serve(tb, rs)

	post := func(body string) (*http.Response, string) {
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b)
	}
	resp, body := post("one")
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "2", resp.Header.Get("Retry-After"))
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	assert.Equal(t, `{"e":1}`, body)
	resp, body = post("two")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	assert.Equal(t, "data: hello\n\n", body)
	resp, _ = post("three")
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	tb.mu.Lock()
	assert.Len(t, tb.errs, 1, "a request past the transcript fails the test")
	tb.mu.Unlock()
	assert.Equal(t, [][]byte{[]byte("one"), []byte("two"), []byte("three")}, srv.Requests())

	rs, err = providertest.Parse([]byte("> reset\ndata: partial\n"))
	require.NoError(t, err)
	reset := providertest.Serve(t, rs)
	r2, err := http.Get(reset.URL)
	require.NoError(t, err)
	defer r2.Body.Close()
	var got bytes.Buffer
	_, err = io.Copy(&got, r2.Body)
	require.Error(t, err, "the connection is dropped, not ended cleanly")
	assert.Equal(t, "data: partial\n", got.String())
}
