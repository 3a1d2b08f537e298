package journal

import (
	"errors"
	"fmt"
	"testing"
)

// TestErrorProtoRoundTrip: every sentinel survives the wire form of an
// actor reply, so errors.Is works across the journal actor; an error that
// wraps none becomes a plain error with its message.
func TestErrorProtoRoundTrip(t *testing.T) {
	sentinels := []error{ErrConflict, ErrStale, ErrNotFound, ErrClosed, ErrCorrupt, ErrInvalid, ErrDeleted, ErrUnavailable, ErrUnknownOutcome}
	for _, s := range sentinels {
		err := fmt.Errorf("pgjournal: append: %w", s)
		back := ErrorFromProto(ErrorToProto(err))
		if !errors.Is(back, s) || back.Error() != err.Error() {
			t.Errorf("%v: came back as %v (errors.Is %t)", s, back, errors.Is(back, s))
		}
		for _, other := range sentinels {
			if other != s && errors.Is(back, other) {
				t.Errorf("%v came back matching %v too", s, other)
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
