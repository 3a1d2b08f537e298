package journal

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lazarusrt/lazarus/messages"
)

// sentinelsByName are the sentinels of package journal, by name.
// TestSentinelsAreListed fails on one that is missing here, so that
// TestErrorProtoRoundTrip checks every one.
var sentinelsByName = map[string]error{
	"ErrConflict": ErrConflict, "ErrStale": ErrStale, "ErrNotFound": ErrNotFound,
	"ErrClosed": ErrClosed, "ErrCorrupt": ErrCorrupt, "ErrInvalid": ErrInvalid,
	"ErrDeleted": ErrDeleted, "ErrNoSpace": ErrNoSpace, "ErrUnavailable": ErrUnavailable,
	"ErrUnknownOutcome": ErrUnknownOutcome, "ErrExists": ErrExists, "ErrEnded": ErrEnded,
	"ErrTooLarge": ErrTooLarge,
}

// TestSentinelsAreListed: every exported package-level variable of package
// journal named Err... (its sentinels) is in sentinelsByName.
func TestSentinelsAreListed(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, spec := range g.Specs {
				for _, id := range spec.(*ast.ValueSpec).Names {
					if id.IsExported() && strings.HasPrefix(id.Name, "Err") {
						found[id.Name] = true
					}
				}
			}
		}
	}
	for name := range found {
		if _, ok := sentinelsByName[name]; !ok {
			t.Errorf("sentinel %s is not in sentinelsByName: add it, and give it an ErrorCode", name)
		}
	}
	for name := range sentinelsByName {
		if !found[name] {
			t.Errorf("sentinelsByName lists %s, which package journal does not declare", name)
		}
	}
}

// TestErrorProtoRoundTrip: every sentinel survives the wire form of an
// actor reply, alone or with the others an error wraps (a store stopped
// on a full disk wraps ErrNoSpace and ErrClosed), so errors.Is works
// across the journal actor; an error that wraps none becomes a plain
// error with its message.
func TestErrorProtoRoundTrip(t *testing.T) {
	for name, s := range sentinelsByName {
		err := fmt.Errorf("pgjournal: append: %w", s)
		back := ErrorFromProto(ErrorToProto(err))
		if !errors.Is(back, s) || back.Error() != err.Error() {
			t.Errorf("%s: came back as %v (errors.Is %t)", name, back, errors.Is(back, s))
		}
		for oname, other := range sentinelsByName {
			if other != s && errors.Is(back, other) {
				t.Errorf("%s came back matching %s too", name, oname)
			}
		}
		for oname, other := range sentinelsByName {
			if other == s {
				continue
			}
			both := fmt.Errorf("store failed: %w: %w", s, other)
			back := ErrorFromProto(ErrorToProto(both))
			for n, x := range sentinelsByName {
				if errors.Is(back, x) != (x == s || x == other) {
					t.Errorf("%s with %s came back as %v, errors.Is %s %t", name, oname, back, n, errors.Is(back, x))
				}
			}
		}
	}
	plain := errors.New("boom")
	if back := ErrorFromProto(ErrorToProto(plain)); back == nil || back.Error() != "boom" {
		t.Errorf("plain error came back as %v", back)
	}
	if ErrorToProto(nil) != nil || ErrorFromProto(nil) != nil {
		t.Error("nil must stay nil")
	}
}

// TestErrorProtoKeepsContextErrors: a context's error (a Store read that
// timed out, a call cancelled) survives the wire form of an actor reply,
// alone or with a sentinel, so that the caller's errors.Is finds it; with
// a sentinel, the sentinel keeps Error.code (a peer that reads code alone,
// or knows no context code, still sees it: a write of unknown outcome cut
// by its context stays of unknown outcome) and the context's code goes in
// Error.also.
func TestErrorProtoKeepsContextErrors(t *testing.T) {
	ctxErrs := map[string]error{"DeadlineExceeded": context.DeadlineExceeded, "Canceled": context.Canceled}
	for name, c := range ctxErrs {
		err := fmt.Errorf("pgjournal: load: %w", c)
		e := ErrorToProto(err)
		if e.GetCode() == messages.ErrorCode_ERROR_CODE_INTERNAL {
			t.Errorf("%s alone got code INTERNAL", name)
		}
		back := ErrorFromProto(e)
		if !errors.Is(back, c) || back.Error() != err.Error() {
			t.Errorf("%s: came back as %v (errors.Is %t)", name, back, errors.Is(back, c))
		}
		for oname, other := range ctxErrs {
			if other != c && errors.Is(back, other) {
				t.Errorf("%s came back matching %s too", name, oname)
			}
		}
		for sname, s := range sentinelsByName {
			if errors.Is(back, s) {
				t.Errorf("%s came back matching %s", name, sname)
			}
			both := fmt.Errorf("append: %w: %w", s, c)
			e := ErrorToProto(both)
			if got := ErrorFromProto(&messages.Error{Code: e.GetCode(), Message: e.GetMessage()}); !errors.Is(got, s) {
				t.Errorf("%s with %s: code %v alone does not say %s", sname, name, e.GetCode(), sname)
			}
			back := ErrorFromProto(e)
			if !errors.Is(back, s) || !errors.Is(back, c) {
				t.Errorf("%s with %s came back as %v (errors.Is sentinel %t, context %t)", sname, name, back, errors.Is(back, s), errors.Is(back, c))
			}
		}
	}
}

// TestErrorFromProtoUnknownCode: a code this version does not know (from
// a newer peer) decodes to a plain error with its message, wrapping the
// sentinels of the codes it does know; an older peer's error (one code, no
// others) decodes as before.
func TestErrorFromProtoUnknownCode(t *testing.T) {
	unknown := messages.ErrorCode(1 << 20)
	err := ErrorFromProto(&messages.Error{Code: unknown, Message: "newer"})
	if err == nil || err.Error() != "newer" {
		t.Fatalf("unknown code came back as %v", err)
	}
	for name, s := range sentinelsByName {
		if errors.Is(err, s) {
			t.Errorf("unknown code came back matching %s", name)
		}
	}
	err = ErrorFromProto(&messages.Error{Code: unknown, Also: []messages.ErrorCode{unknown, messages.ErrorCode_ERROR_CODE_CLOSED, messages.ErrorCode_ERROR_CODE_INTERNAL}, Message: "newer"})
	if err == nil || err.Error() != "newer" || !errors.Is(err, ErrClosed) || errors.Is(err, ErrNoSpace) {
		t.Fatalf("unknown code with a known one came back as %v", err)
	}
	err = ErrorFromProto(&messages.Error{Code: messages.ErrorCode_ERROR_CODE_CLOSED, Message: "older"})
	if err == nil || err.Error() != "older" || !errors.Is(err, ErrClosed) {
		t.Fatalf("an older peer's code came back as %v", err)
	}
}

// TestPassedOver: nothing passed over is no error; otherwise the error
// wraps ErrCorrupt and the first record's error, and counts them all.
func TestPassedOver(t *testing.T) {
	var p PassedOver
	if err := p.Err("deadlines"); err != nil {
		t.Fatalf("empty: %v", err)
	}
	first := Corruptf("deadline key 1")
	p.Add(first)
	p.Add(Corruptf("deadline key 2"))
	err := p.Err("deadlines")
	if !errors.Is(err, ErrCorrupt) || !errors.Is(err, first) {
		t.Fatalf("%v does not wrap ErrCorrupt and the first record's error", err)
	}
	if want := "deadlines: passed over 2 corrupt record(s), the first: deadline key 1: " + ErrCorrupt.Error(); err.Error() != want {
		t.Fatalf("got %q, want %q", err, want)
	}
	var q PassedOver
	q.Add(errors.New("plain"))
	if err := q.Err("x"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("%v does not wrap ErrCorrupt", err)
	}
}
