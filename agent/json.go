package agent

import "unicode/utf8"

// maxJSONDepth is the nesting depth beyond which ValidJSON refuses a value,
// as encoding/json does.
const maxJSONDepth = 10000

// ValidJSON reports whether s is valid UTF-8 and exactly one JSON value
// (RFC 8259), with optional whitespace around it: what
// utf8.ValidString(s) && json.Valid([]byte(s)) reports, including
// encoding/json's limit of 10,000 levels of nesting. It reads s in one pass
// and allocates nothing for values nested up to 64 levels deep. Tool
// results and arguments are checked with it on every call, where
// encoding/json's validator (which also copies the string) cost several
// percent of the runtime's CPU per event.
func ValidJSON(s string) bool {
	v := validator{s: s}
	return v.run()
}

// validator holds the state of one ValidJSON call: the text and the
// position read up to.
type validator struct {
	s string
	i int
}

func (v *validator) run() bool {
	// stack records the open containers, innermost last: '{' or '['.
	var buf [64]byte
	stack := buf[:0]
	for {
		// A value is expected here.
		v.space()
		if v.i >= len(v.s) {
			return false
		}
		switch c := v.s[v.i]; c {
		case '{', '[':
			if len(stack) >= maxJSONDepth {
				return false
			}
			v.i++
			v.space()
			closer := byte('}')
			if c == '[' {
				closer = ']'
			}
			if v.i < len(v.s) && v.s[v.i] == closer {
				v.i++ // an empty container is a complete value
				break
			}
			stack = append(stack, c)
			if c == '{' && !v.key() {
				return false
			}
			continue // its first value
		case '"':
			if !v.str() {
				return false
			}
		case 't':
			if !v.lit("true") {
				return false
			}
		case 'f':
			if !v.lit("false") {
				return false
			}
		case 'n':
			if !v.lit("null") {
				return false
			}
		default:
			if !v.num() {
				return false
			}
		}
		// A value ended: close containers, or go on to the next element.
		for {
			v.space()
			if len(stack) == 0 {
				return v.i == len(v.s)
			}
			if v.i >= len(v.s) {
				return false
			}
			top := stack[len(stack)-1]
			c := v.s[v.i]
			v.i++
			switch {
			case c == ',' && top == '{':
				if !v.key() {
					return false
				}
			case c == ',':
			case c == '}' && top == '{', c == ']' && top == '[':
				stack = stack[:len(stack)-1]
				continue
			default:
				return false
			}
			break
		}
	}
}

// key reads an object's key and its colon, with the whitespace before them.
func (v *validator) key() bool {
	v.space()
	if v.i >= len(v.s) || v.s[v.i] != '"' || !v.str() {
		return false
	}
	v.space()
	if v.i >= len(v.s) || v.s[v.i] != ':' {
		return false
	}
	v.i++
	return true
}

func (v *validator) space() {
	for v.i < len(v.s) {
		switch v.s[v.i] {
		case ' ', '\t', '\n', '\r':
			v.i++
		default:
			return
		}
	}
}

func (v *validator) lit(word string) bool {
	if len(v.s)-v.i < len(word) || v.s[v.i:v.i+len(word)] != word {
		return false
	}
	v.i += len(word)
	return true
}

// str reads a string, v.s[v.i] being its opening quote.
func (v *validator) str() bool {
	s, i := v.s, v.i+1
	for i < len(s) {
		c := s[i]
		switch {
		case c == '"':
			v.i = i + 1
			return true
		case c == '\\':
			if i+1 >= len(s) {
				return false
			}
			switch s[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(s)-i < 6 {
					return false
				}
				for _, h := range []byte(s[i+2 : i+6]) {
					if !isHex(h) {
						return false
					}
				}
				i += 6
			default:
				return false
			}
		case c < 0x20:
			return false
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				return false
			}
			i += size
		}
	}
	return false
}

// num reads a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (v *validator) num() bool {
	s, i := v.s, v.i
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && '1' <= s[i] && s[i] <= '9':
		i = digits(s, i)
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		j := digits(s, i+1)
		if j == i+1 {
			return false
		}
		i = j
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := digits(s, i)
		if j == i {
			return false
		}
		i = j
	}
	v.i = i
	return true
}

// digits returns the index of the first byte at or after i that is not a
// decimal digit.
func digits(s string, i int) int {
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	return i
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
