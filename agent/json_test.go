package agent

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// referenceValid is what ValidJSON promises to compute.
func referenceValid(s string) bool { return utf8.ValidString(s) && json.Valid([]byte(s)) }

var jsonCases = []string{
	``, ` `, `{}`, `[]`, ` { } `, `[ ]`, `{"a":1}`, `{"a" : 1 , "b":[1,2,{"c":null}]}`,
	`{"a":1,}`, `{,}`, `[1,]`, `[,1]`, `{"a"}`, `{"a":}`, `{1:2}`, `{"a":1 "b":2}`, `[1 2]`,
	`"x"`, `"\u00e9\n\t\"\\\/\b\f\r"`, `"\u12"`, `"\u12G4"`, `"\x"`, `"unterminated`, `"tab	in"`,
	"\"caf\u00e9\"", "\"\xff\"", "\xff", "\"\xed\xa0\x80\"", // invalid UTF-8, a surrogate's bytes
	`0`, `-0`, `01`, `-`, `1.`, `.5`, `1.5e`, `1e+`, `1E-7`, `-12.5e10`, `+1`, `1.5.2`, `00`,
	`true`, `false`, `null`, `tru`, `nul`, `True`, `truex`, `true false`, `[true,false,null]`,
	`{}{}`, `[]]`, `[[]`, `{"a":[}`, `]`, `}`, `:`, `{"a":{"b":{"c":[[[]]]}}}`,
}

func TestValidJSONAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range jsonCases {
		require.Equal(t, referenceValid(s), ValidJSON(s), "%q", s)
	}
}

func TestValidJSONDepthLimit(t *testing.T) {
	for _, depth := range []int{maxJSONDepth - 1, maxJSONDepth, maxJSONDepth + 1} {
		for _, inner := range []string{"", "1"} {
			s := strings.Repeat("[", depth) + inner + strings.Repeat("]", depth)
			require.Equal(t, referenceValid(s), ValidJSON(s), "depth %d, inner %q", depth, inner)
		}
	}
}

func TestValidJSONAllocatesNothing(t *testing.T) {
	s := `{"results":[{"title":"caf` + "\u00e9" + `","score":0.5,"tags":["a","b"],"ok":true,"next":null}]}`
	require.True(t, ValidJSON(s))
	require.Zero(t, testing.AllocsPerRun(100, func() { ValidJSON(s) }))
}

func FuzzValidJSON(f *testing.F) {
	for _, s := range jsonCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := ValidJSON(s), referenceValid(s); got != want {
			t.Fatalf("ValidJSON(%q) = %v, encoding/json says %v", s, got, want)
		}
	})
}

func BenchmarkValidJSON(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"results":[`)
	for i := 0; sb.Len() < 2000; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"title":"a result about durable agents","score":0.875,"url":"https://example.com/doc","tags":["x","y"]}`)
	}
	sb.WriteString(`]}`)
	s := sb.String()
	b.Run("ValidJSON", func(b *testing.B) {
		b.SetBytes(int64(len(s)))
		for b.Loop() {
			if !ValidJSON(s) {
				b.Fatal("invalid")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(s)))
		for b.Loop() {
			if !referenceValid(s) {
				b.Fatal("invalid")
			}
		}
	})
}
