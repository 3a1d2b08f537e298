package pebblejournal

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestIDEncoding(t *testing.T) {
	cases := []struct {
		name string
		id   string
		want []byte
	}{
		{"plain", "ab", []byte{'a', 'b', 0, 1}},
		{"nul", "a\x00b", []byte{'a', 0, 0xFF, 'b', 0, 1}},
		{"trailing nul", "a\x00", []byte{'a', 0, 0xFF, 0, 1}},
		{"slash", "a/b", []byte{'a', '/', 'b', 0, 1}},
		{"high bytes", "é", []byte{0xC3, 0xA9, 0, 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := appendID(nil, tc.id)
			require.Equal(t, tc.want, got)
			id, rest, ok := decodeID(append(got, 'x'))
			require.True(t, ok)
			require.Equal(t, tc.id, id)
			require.Equal(t, []byte{'x'}, rest)
		})
	}
}

func TestDecodeIDMalformed(t *testing.T) {
	for _, b := range [][]byte{nil, {'a'}, {'a', 0}, {'a', 0, 2}, {0, 0}, {0, 0xFE}} {
		_, _, ok := decodeID(b)
		require.False(t, ok, "%q", b)
	}
}

// TestConversationRangesIsolated checks that the key range of one
// conversation holds none of the keys of its look-alikes.
func TestConversationRangesIsolated(t *testing.T) {
	ids := []string{"a", "a/b", "a\x00b", "ab", "a\x00", "a\x01", "", "b", "a\xff"}
	for _, a := range ids {
		lo, hi := convKey(famEvent, a), convEnd(famEvent, a)
		for _, b := range ids {
			if a == b {
				continue
			}
			for _, k := range [][]byte{convKey(famEvent, b), seqKey(famEvent, b, 0), seqKey(famEvent, b, ^uint64(0))} {
				inside := bytes.Compare(k, lo) >= 0 && bytes.Compare(k, hi) < 0
				require.False(t, inside, "key %q of %q inside the range of %q", k, b, a)
			}
		}
		require.True(t, bytes.Compare(seqKey(famEvent, a, ^uint64(0)), hi) < 0)
	}
}

func TestByTimeKeyOrder(t *testing.T) {
	base := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	times := []time.Time{
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Unix(-1, 999_999_999),
		time.Unix(0, 0),
		base,
		base.Add(time.Nanosecond),
		base.Add(time.Second),
		time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
	}
	for i := 1; i < len(times); i++ {
		a := byTimeKey(timestamppb.New(times[i-1]), "z", "z")
		b := byTimeKey(timestamppb.New(times[i]), "a", "a")
		require.Negative(t, bytes.Compare(a, b), "%v vs %v", times[i-1], times[i])
		// The upper bound of "at or before times[i-1]" admits a and not b.
		u := byTimeUpper(times[i-1])
		require.Negative(t, bytes.Compare(a, u))
		require.GreaterOrEqual(t, bytes.Compare(b, u), 0)
	}
	k := byTimeKey(timestamppb.New(base), "call\x00", "conv/1")
	at, call, conv, err := parseByTimeKey(k)
	require.NoError(t, err)
	require.True(t, at.AsTime().Equal(base))
	require.Equal(t, "call\x00", call)
	require.Equal(t, "conv/1", conv)
	_, _, _, err = parseByTimeKey(k[:len(k)-1])
	require.Error(t, err)
	require.Contains(t, err.Error(), "deadline-by-time")
}

func checkIDPair(t *testing.T, a, b string) {
	ea, eb := appendID(nil, a), appendID(nil, b)
	// Round trip.
	for _, c := range []struct {
		id  string
		enc []byte
	}{{a, ea}, {b, eb}} {
		id, rest, ok := decodeID(c.enc)
		if !ok || id != c.id || len(rest) != 0 {
			t.Fatalf("decode(encode(%q)) = %q, %q, %v", c.id, id, rest, ok)
		}
	}
	if a == b {
		return
	}
	// Prefix-freedom.
	if bytes.HasPrefix(ea, eb) || bytes.HasPrefix(eb, ea) {
		t.Fatalf("encodings of %q and %q: one is a prefix of the other (%q, %q)", a, b, ea, eb)
	}
	// Order preservation, also with suffixes appended (seqs, nested ids).
	want := strings.Compare(a, b)
	if got := bytes.Compare(ea, eb); got != want {
		t.Fatalf("order of %q, %q is %d, encoded %d", a, b, want, got)
	}
	if got := bytes.Compare(append(ea, 0xFF, 0xFF), append(eb, 0, 0)); got != want {
		t.Fatalf("order of %q, %q with suffixes is %d, want %d", a, b, got, want)
	}
}

// FuzzKeyEncoding checks the id encoding: round trip, prefix-freedom and
// order preservation.
func FuzzKeyEncoding(f *testing.F) {
	for _, p := range [][2]string{
		{"a", "a/b"}, {"a", "a\x00b"}, {"a", "ab"}, {"a\x00", "a"}, {"", "\x00"},
		{"a\x00\x01", "a\x00"}, {"\xff", "\x00\xff"}, {"conv-1", "conv-10"},
	} {
		f.Add(p[0], p[1])
	}
	f.Fuzz(checkIDPair)
}
