package main

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/server"
)

// TestAPIErrorWrapsTheCodesSentinel: an error answer of a node wraps the
// sentinel the server's classify maps to its code (in reverse), for every
// code the server answers: ended is journal.ErrEnded and timeout
// context.DeadlineExceeded (they wrapped nothing), and a code of no
// sentinel wraps none. The table names every code package server
// declares.
func TestAPIErrorWrapsTheCodesSentinel(t *testing.T) {
	sentinels := []error{journal.ErrNotFound, journal.ErrDeleted, journal.ErrStale, journal.ErrConflict,
		journal.ErrInvalid, journal.ErrEnded, journal.ErrUnavailable, lazarus.ErrForbidden,
		lazarus.ErrUnknownOutcome, context.DeadlineExceeded, context.Canceled, errors.ErrUnsupported, lazarus.ErrTooManySubscriptions}
	seen := map[string]bool{}
	for _, c := range []struct {
		code string
		want []error
	}{
		{server.CodeInvalid, []error{journal.ErrInvalid}},
		{server.CodeTooLarge, []error{journal.ErrInvalid}},
		{server.CodeUnauthenticated, nil},
		{server.CodeForbidden, []error{lazarus.ErrForbidden}},
		{server.CodeNotFound, []error{journal.ErrNotFound}},
		{server.CodeMethodNotAllowed, nil},
		{server.CodeStale, []error{journal.ErrStale}},
		{server.CodeConflict, []error{journal.ErrConflict}},
		{server.CodeDeleted, []error{journal.ErrDeleted, journal.ErrNotFound}},
		{server.CodeEnded, []error{journal.ErrEnded}},
		{server.CodeUnknownOutcome, []error{lazarus.ErrUnknownOutcome}},
		{server.CodeTimeout, []error{context.DeadlineExceeded}},
		{server.CodeUnsupported, []error{errors.ErrUnsupported}},
		{server.CodeClosed, []error{journal.ErrUnavailable}},
		{server.CodeUnavailable, []error{journal.ErrUnavailable}},
		{server.CodeLagged, nil},
		{server.CodeTooManySubscriptions, []error{lazarus.ErrTooManySubscriptions}},
		{server.CodeInternal, nil},
		{"a_newer_code", nil},
	} {
		seen[c.code] = true
		err := &apiError{status: http.StatusTeapot, code: c.code, msg: "m"}
		for _, s := range sentinels {
			want := false
			for _, w := range c.want {
				want = want || w == s
			}
			if errors.Is(err, s) != want {
				t.Errorf("code %s: errors.Is %v is %t", c.code, s, !want)
			}
		}
	}
	for _, code := range serverCodes(t) {
		if !seen[code] {
			t.Errorf("server code %q is not in the table: map it in apiError.Unwrap", code)
		}
	}
}

// serverCodes are the values of package server's Code constants.
func serverCodes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "..", "server", "errors.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			v := spec.(*ast.ValueSpec)
			for i, name := range v.Names {
				if !strings.HasPrefix(name.Name, "Code") || i >= len(v.Values) {
					continue
				}
				if lit, ok := v.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					code, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					codes = append(codes, code)
				}
			}
		}
	}
	if len(codes) < 10 {
		t.Fatalf("found only %d codes in server/errors.go: %v", len(codes), codes)
	}
	return codes
}

// TestRetryAfterAnswersMapToTheirSentinels: the node's 429
// too_many_subscriptions and 503 unavailable carry a Retry-After header;
// the client still maps them to their sentinels (and so to the offline
// mode's exit status, 1), whatever the header.
func TestRetryAfterAnswersMapToTheirSentinels(t *testing.T) {
	for _, c := range []struct {
		status int
		code   string
		want   error
	}{
		{http.StatusTooManyRequests, server.CodeTooManySubscriptions, lazarus.ErrTooManySubscriptions},
		{http.StatusServiceUnavailable, server.CodeUnavailable, journal.ErrUnavailable},
	} {
		node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "5")
			w.WriteHeader(c.status)
			fmt.Fprintf(w, `{"error":{"code":%q,"message":"m"}}`, c.code)
		}))
		r := &remote{base: node.URL, hc: node.Client()}
		err := r.call(context.Background(), http.MethodGet, "/v1/conversations/c/stream", nil, nil)
		node.Close()
		if !errors.Is(err, c.want) {
			t.Errorf("%d %s: %v does not wrap %v", c.status, c.code, err, c.want)
		}
		if got := exitCode(err); got != exitError {
			t.Errorf("%d %s: exit status %d, want %d", c.status, c.code, got, exitError)
		}
	}
}
