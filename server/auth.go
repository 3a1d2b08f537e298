package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
)

// Authenticator turns a request into the identity of its caller: a user id
// and roles. ok is false for a request without valid credentials, which is
// answered 401. It is called once per request, concurrently, and must not
// keep r.
//
// The server does not look at the credentials itself: a header that
// carries them may come more than once, and r.Header.Get returns only the
// first. An Authenticator that reads a header should refuse a request
// that gives it more than once (len(r.Header.Values(name)) != 1), as
// BearerTokens does, unless a proxy in front is known to replace the
// client's.
type Authenticator interface {
	Authenticate(r *http.Request) (id agent.Identity, ok bool)
}

// AuthenticatorFunc adapts a function to Authenticator.
type AuthenticatorFunc func(r *http.Request) (agent.Identity, bool)

// Authenticate calls f.
func (f AuthenticatorFunc) Authenticate(r *http.Request) (agent.Identity, bool) { return f(r) }

// BearerTokens authenticates the header "Authorization: Bearer <token>"
// against a fixed set of tokens, each mapped to an identity. As RFC 9110
// has it, the scheme is matched without regard to case and is followed by
// one or more spaces; the token is the rest of the header, which holds no
// space or tab (a token68, not a list of parameters). A request with
// more than one Authorization header is refused, whatever they hold (the
// same token twice included): which one names the caller is not for the
// server to guess, and a proxy that adds its own must replace the
// client's. A presented
// token is compared with every known one in constant time
// (crypto/subtle, over SHA-256 digests, so neither the position of the
// first differing byte nor the tokens' lengths show in the time taken).
type BearerTokens struct {
	digests [][sha256.Size]byte
	ids     []agent.Identity
}

// NewBearerTokens returns a BearerTokens over tokens (token -> identity).
// A token must be non-empty and hold no space, tab or other control
// character (a header could not carry it as one credential); an identity must name a user (a UserID that is
// neither empty nor agent.SystemUserID) and pass agent.ValidateIdentity.
// Errors wrap journal.ErrInvalid.
func NewBearerTokens(tokens map[string]agent.Identity) (*BearerTokens, error) {
	b := &BearerTokens{}
	for tok, id := range tokens {
		switch {
		case tok == "":
			return nil, fmt.Errorf("server: bearer tokens: %w", journal.Invalidf("empty token"))
		case strings.ContainsFunc(tok, notInToken):
			// The token is a secret: the error does not quote it.
			return nil, fmt.Errorf("server: bearer tokens: %w", journal.Invalidf("a token (of %q) holds a space or a control character", id.UserID))
		case id.UserID == "" || id.UserID == agent.SystemUserID:
			return nil, fmt.Errorf("server: bearer tokens: %w", journal.Invalidf("a token's identity must name a user (not %q)", id.UserID))
		}
		if err := agent.ValidateIdentity(id); err != nil {
			return nil, fmt.Errorf("server: bearer tokens: identity of %q: %w", id.UserID, err)
		}
		b.digests = append(b.digests, sha256.Sum256([]byte(tok)))
		b.ids = append(b.ids, agent.Identity{UserID: id.UserID, Roles: append([]string(nil), id.Roles...)})
	}
	return b, nil
}

// notInToken reports whether r cannot be in a bearer token: a space or a
// control character (tab included).
func notInToken(r rune) bool { return r == ' ' || r < 0x20 || r == 0x7f }

// Authenticate implements Authenticator.
func (b *BearerTokens) Authenticate(r *http.Request) (agent.Identity, bool) {
	vals := r.Header.Values("Authorization")
	if len(vals) != 1 {
		return agent.Identity{}, false
	}
	// The field's value without the optional whitespace around it (which
	// net/http's parser drops already).
	h := strings.Trim(vals[0], " \t")
	scheme, tok, found := strings.Cut(h, " ")
	tok = strings.TrimLeft(tok, " ") // 1*SP after the scheme
	if !found || !strings.EqualFold(scheme, "Bearer") || tok == "" || strings.ContainsFunc(tok, notInToken) {
		return agent.Identity{}, false
	}
	d := sha256.Sum256([]byte(tok))
	match := -1
	for i := range b.digests {
		// No early exit: every token is compared.
		if subtle.ConstantTimeCompare(d[:], b.digests[i][:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return agent.Identity{}, false
	}
	id := b.ids[match]
	return agent.Identity{UserID: id.UserID, Roles: append([]string(nil), id.Roles...)}, true
}
