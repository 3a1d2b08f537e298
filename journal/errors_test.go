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
