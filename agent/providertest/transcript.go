// Package providertest replays recorded wire transcripts of a model provider
// from an httptest server, and holds the suite every provider adapter
// (agent/openai, agent/anthropic) runs against its own transcripts: the same
// cases, the same expected outcomes, each in the provider's wire format.
// Compare is the measurement the providers' benchmarks make against their
// raw SDK on the same transcript.
//
// # Transcript files
//
// A transcript is a text file of one or more HTTP responses, served in order
// to successive requests. Responses are separated by a line "===" (the
// newline before it belongs to the separator: a stream whose last event
// must be dispatched ends in a blank line before it). A
// response starts with optional directive lines:
//
//	> status 429                 the status, 100 to 999 (default 200)
//	> header Retry-After: 2      a response header (repeatable)
//	> split 3                    write the body in pieces of 3 bytes, each flushed
//	> reset                      end the response abruptly after the body
//	                             (the connection is dropped: no clean end)
//
// followed by the body, verbatim (for a stream, the server-sent events). A
// 200 response is sent as text/event-stream unless a Content-Type header is
// given; any other status as application/json. Lines starting with "#"
// before the first directive or body line are comments.
package providertest

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Response is one response of a transcript.
type Response struct {
	// Status is the HTTP status.
	Status int
	// Header holds the response headers.
	Header http.Header
	// Body is written verbatim.
	Body []byte
	// Split, if > 0, writes the body in pieces of Split bytes, each flushed.
	Split int
	// Reset drops the connection after the body, without ending the response.
	Reset bool
}

// Load reads and parses the transcript file at path.
func Load(path string) ([]Response, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rs, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rs, nil
}

// Parse parses a transcript (see the package doc).
func Parse(data []byte) ([]Response, error) {
	var out []Response
	for i, part := range bytes.Split(data, []byte("\n===\n")) {
		r := Response{Status: http.StatusOK, Header: http.Header{}}
		lines := bytes.SplitAfter(part, []byte("\n"))
		body := 0
		directives := false // a directive was read: "#" lines are no longer comments
		for _, l := range lines {
			s := strings.TrimRight(string(l), "\n")
			switch {
			case strings.HasPrefix(s, "#") && !directives:
			case strings.HasPrefix(s, "> "):
				directives = true
				if err := r.directive(s[2:]); err != nil {
					return nil, fmt.Errorf("response %d: %w", i+1, err)
				}
			default:
				goto bodyStart
			}
			body += len(l)
		}
	bodyStart:
		r.Body = part[body:]
		if r.Header.Get("Content-Type") == "" {
			if r.Status == http.StatusOK {
				r.Header.Set("Content-Type", "text/event-stream")
			} else {
				r.Header.Set("Content-Type", "application/json")
			}
		}
		out = append(out, r)
	}
	return out, nil
}

func (r *Response) directive(d string) error {
	name, arg, _ := strings.Cut(d, " ")
	switch name {
	case "status":
		n, err := strconv.Atoi(arg)
		if err != nil || n < 100 || n > 999 {
			return fmt.Errorf("bad status %q", arg) // net/http sends none other
		}
		r.Status = n
	case "header":
		k, v, ok := strings.Cut(arg, ":")
		if !ok {
			return fmt.Errorf("bad header %q", arg)
		}
		r.Header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	case "split":
		n, err := strconv.Atoi(arg)
		if err != nil || n < 1 {
			return fmt.Errorf("bad split %q", arg)
		}
		r.Split = n
	case "reset":
		r.Reset = true
	default:
		return fmt.Errorf("unknown directive %q", d)
	}
	return nil
}

// Server replays a transcript: the n-th request gets the n-th response. A
// request past the last response gets a 500 and fails the test.
type Server struct {
	*httptest.Server
	t         testing.TB
	responses []Response
	mu        sync.Mutex
	requests  [][]byte
}

// Serve starts a Server replaying responses; it is closed at the test's end.
func Serve(t testing.TB, responses []Response) *Server {
	s := &Server{t: t, responses: responses}
	s.Server = httptest.NewServer(http.HandlerFunc(s.handle))
	t.Cleanup(s.Close)
	return s
}

// Requests returns the bodies of the requests received so far, in order.
func (s *Server) Requests() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.requests...)
}

func (s *Server) handle(w http.ResponseWriter, req *http.Request) {
	var body bytes.Buffer
	_, _ = body.ReadFrom(req.Body)
	s.mu.Lock()
	n := len(s.requests)
	s.requests = append(s.requests, body.Bytes())
	s.mu.Unlock()
	if n >= len(s.responses) {
		s.t.Errorf("providertest: request %d, but the transcript has %d responses", n+1, len(s.responses))
		http.Error(w, `{"error":{"message":"transcript exhausted"}}`, http.StatusInternalServerError)
		return
	}
	Write(w, s.responses[n])
}

// Write writes r to w, as Server does.
func Write(w http.ResponseWriter, r Response) {
	for k, vs := range r.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(r.Status)
	f, _ := w.(http.Flusher)
	b := r.Body
	for len(b) > 0 {
		n := len(b)
		if r.Split > 0 {
			n = min(n, r.Split)
		}
		if _, err := w.Write(b[:n]); err != nil {
			return
		}
		b = b[n:]
		if f != nil && (r.Split > 0 || r.Reset) {
			f.Flush()
		}
	}
	if r.Reset {
		panic(http.ErrAbortHandler) // drops the connection; the server logs nothing
	}
}
