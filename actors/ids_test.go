package actors

import (
	"bytes"
	"cmp"
	"math/rand/v2"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNewToolCallIDFormat(t *testing.T) {
	re := regexp.MustCompile(`^call_[2-7a-z]{26}$`)
	seen := map[string]bool{}
	for range 10_000 {
		id := NewToolCallID()
		require.Regexp(t, re, id)
		require.False(t, seen[id], "ids are unique: %s twice", id)
		seen[id] = true
	}
}

// TestIDEncodingKeepsOrder: the encoding of equal-length byte strings sorts
// as the bytes do, so ids minted later (a later clock) sort later.
func TestIDEncodingKeepsOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10_000 {
		a, b := make([]byte, 16), make([]byte, 16)
		for i := range a {
			a[i], b[i] = byte(rng.IntN(256)), byte(rng.IntN(256))
		}
		if rng.IntN(2) == 0 {
			copy(b, a[:rng.IntN(16)]) // share a prefix
		}
		want := bytes.Compare(a, b)
		got := cmp.Compare(idEncoding.EncodeToString(a), idEncoding.EncodeToString(b))
		require.Equal(t, want, got, "%x vs %x", a, b)
	}
}
