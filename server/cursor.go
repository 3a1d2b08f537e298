package server

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"strings"
)

// sealedPrefix starts a sealed cursor (see cursors).
const sealedPrefix = "~"

// cursors seals the next cursor of a listing page that ends on a row its
// caller may not see (a page that ran out of its scan budget among
// others' rows): that row's ids are the position to resume from, and a
// stranger must not learn them. A sealed cursor is opened only by the
// Server that made it (its key is random, made by New); every other cursor
// is the plain position, as before, so a client may still start after an
// id it knows.
type cursors struct {
	aead cipher.AEAD
}

func newCursors() cursors {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	block, err := aes.NewCipher(key)
	if err != nil {
		panic(err) // a 32-byte key is valid
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return cursors{aead: aead}
}

// next returns the next cursor of a page whose last row read is at pos:
// pos itself when that row is the caller's own (own) and pos cannot be
// taken for a sealed cursor, else pos sealed.
func (c cursors) next(pos string, own bool) string {
	if own && !strings.HasPrefix(pos, sealedPrefix) {
		return pos
	}
	return c.seal(pos)
}

// seal returns pos as a sealed cursor.
func (c cursors) seal(pos string) string {
	nonce := make([]byte, c.aead.NonceSize(), c.aead.NonceSize()+len(pos)+c.aead.Overhead())
	_, _ = rand.Read(nonce)
	return sealedPrefix + base64.RawURLEncoding.EncodeToString(c.aead.Seal(nonce, nonce, []byte(pos), nil))
}

// open returns the position of cursor: the sealed one's, or cursor itself.
// A cursor that looks sealed but does not open (made by another Server, or
// before a restart) is a bad request.
func (c cursors) open(cursor string) (string, error) {
	rest, ok := strings.CutPrefix(cursor, sealedPrefix)
	if !ok {
		return cursor, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err == nil && len(b) >= c.aead.NonceSize() {
		n := c.aead.NonceSize()
		var pos []byte
		if pos, err = c.aead.Open(nil, b[:n], b[n:], nil); err == nil {
			return string(pos), nil
		}
	}
	return "", errInvalid("cursor: not a cursor of this server (page again from the start)")
}
