package actors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"math/rand/v2"
	"regexp"
	"testing"
	"time"

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

// TestNewToolCallIDAtEncodesItsTime: the id carries the time it was given
// (the conversation's Clock), not the wall clock's.
func TestNewToolCallIDAtEncodesItsTime(t *testing.T) {
	at := time.Date(2001, 2, 3, 4, 5, 6, 7, time.UTC)
	id := NewToolCallIDAt(at)
	raw, err := idEncoding.DecodeString(id[len("call_"):])
	require.NoError(t, err)
	require.Equal(t, uint64(at.UnixNano()), binary.BigEndian.Uint64(raw[:8]))
	require.Less(t, id, NewToolCallIDAt(at.Add(time.Nanosecond)), "a later time sorts later")
}
