package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// Limits of an Identity, checked by ValidateIdentity: a Send or Resolve
// whose scope exceeds them is refused with journal.ErrInvalid.
const (
	// MaxUserIDBytes bounds Scope.UserID.
	MaxUserIDBytes = 256
	// MaxRoles bounds the number of Scope.Roles.
	MaxRoles = 32
	// MaxRoleBytes bounds one role.
	MaxRoleBytes = 128
)

// ErrForbidden is wrapped by the error of a Resolve or Reject that the
// scope may not give: an anonymous answer (a scope without a UserID) to a
// tool that does not set AllowAnonymous, or an answer the tool's Authorize
// refused. Nothing is written.
var ErrForbidden = errors.New("agent: forbidden")

// Identity is the storable part of a Scope: who asked for a turn (the
// requester) or answered a human call (the resolver). The log records it;
// it never holds secrets or handles.
type Identity struct {
	// UserID is Scope.UserID: empty for an anonymous caller, SystemUserID
	// for the runtime itself.
	UserID string
	// Roles is Scope.Roles.
	Roles []string
}

// IsZero reports whether the identity names nobody (an anonymous caller).
func (id Identity) IsZero() bool { return id.UserID == "" && len(id.Roles) == 0 }

// HasRole reports whether the identity holds the named role.
func (id Identity) HasRole(role string) bool { return slices.Contains(id.Roles, role) }

// Proto returns the identity as stored, or nil for the zero identity.
func (id Identity) Proto() *messages.Identity {
	if id.IsZero() {
		return nil
	}
	return &messages.Identity{UserId: id.UserID, Roles: slices.Clone(id.Roles)}
}

// IdentityOf returns the identity stored in p (the zero identity for nil).
func IdentityOf(p *messages.Identity) Identity {
	if p == nil {
		return Identity{}
	}
	return Identity{UserID: p.GetUserId(), Roles: slices.Clone(p.GetRoles())}
}

// Identity returns the storable part of the scope: its user id and roles.
func (s Scope) Identity() Identity {
	return Identity{UserID: s.UserID, Roles: slices.Clone(s.Roles)}
}

// ScopeOf returns a scope that holds only id: no permissions, no values.
func ScopeOf(id Identity) Scope {
	return Scope{UserID: id.UserID, Roles: slices.Clone(id.Roles)}
}

// ValidateIdentity checks the identity of a scope against the limits above:
// valid UTF-8, a user id of at most MaxUserIDBytes, at most MaxRoles roles
// of 1..MaxRoleBytes bytes each. Errors wrap journal.ErrInvalid.
func ValidateIdentity(id Identity) error {
	switch {
	case len(id.UserID) > MaxUserIDBytes:
		return journal.Invalidf("user id of %d bytes exceeds %d", len(id.UserID), MaxUserIDBytes)
	case !utf8.ValidString(id.UserID):
		return journal.Invalidf("user id is not valid UTF-8")
	case len(id.Roles) > MaxRoles:
		return journal.Invalidf("%d roles exceed %d", len(id.Roles), MaxRoles)
	}
	for _, r := range id.Roles {
		switch {
		case r == "":
			return journal.Invalidf("empty role")
		case len(r) > MaxRoleBytes:
			return journal.Invalidf("role of %d bytes exceeds %d", len(r), MaxRoleBytes)
		case !utf8.ValidString(r):
			return journal.Invalidf("role is not valid UTF-8")
		}
	}
	return nil
}

// ScopeLoader rebuilds a full scope (permissions, handles) from the
// identity of a turn's requester, when the runtime resumes the turn on its
// own: after a kill, a restart, an answer or an expiry revived the
// conversation, with nobody's scope at hand. It is called on a goroutine
// the runtime owns, never on an actor's, and must honour ctx. An error is
// logged and the resumed work runs under SystemScope (a RequiresUser tool
// then fails as a tool error of code CodeScope). The UserID of the scope it
// returns should be the identity's: the runtime does not check.
type ScopeLoader func(ctx context.Context, requester Identity) (Scope, error)

// Authorization is what a human tool's Authorize is asked: may Resolver
// answer this call?
type Authorization struct {
	// ConversationID names the call's conversation.
	ConversationID string
	// ToolCallID is the call's id.
	ToolCallID string
	// Tool is the tool's name.
	Tool string
	// Arguments is the call's JSON arguments object, as text.
	Arguments string
	// Prompt is what the human is asked.
	Prompt string
	// Requester is who asked for the turn that made the call (zero when
	// unknown: an anonymous send, or a call written before requesters were
	// recorded).
	Requester Identity
	// Resolver is the scope of the Resolve or Reject call.
	Resolver Scope
	// Reject is true for Reject, false for Resolve.
	Reject bool
}

// Authorizer decides whether an answer may be given: nil allows it; an
// error refuses it, and the runtime's error wraps both ErrForbidden and it.
// It runs on the caller's goroutine, before anything is written, and must
// not block for long. A panic refuses the answer.
type Authorizer func(ctx context.Context, a Authorization) error

// RequireRole allows only resolvers holding role.
func RequireRole(role string) Authorizer {
	return func(_ context.Context, a Authorization) error {
		if slices.Contains(a.Resolver.Roles, role) {
			return nil
		}
		return fmt.Errorf("answering %s needs the role %q", a.Tool, role)
	}
}

// RequesterOnly allows only the user who asked for the turn that made the
// call. A call whose requester is unknown can then not be answered.
func RequesterOnly() Authorizer {
	return func(_ context.Context, a Authorization) error {
		if a.Requester.UserID != "" && a.Resolver.UserID == a.Requester.UserID {
			return nil
		}
		return fmt.Errorf("only the requester may answer %s", a.Tool)
	}
}

// AnyOf allows an answer that at least one of authorizers allows; with no
// authorizers (nil ones are skipped) it allows nothing. The error of a
// refusal joins theirs. It keeps its own copy of authorizers.
func AnyOf(authorizers ...Authorizer) Authorizer {
	authorizers = slices.Clone(authorizers)
	return func(ctx context.Context, a Authorization) error {
		errs := make([]error, 0, len(authorizers))
		for _, f := range authorizers {
			if f == nil {
				continue
			}
			err := f(ctx, a)
			if err == nil {
				return nil
			}
			errs = append(errs, err)
		}
		if len(errs) == 0 {
			return errors.New("no authorizer allows it")
		}
		return errors.Join(errs...)
	}
}

// Authorize applies the rules of the human tool t to an answer: an
// anonymous resolver (no UserID) is refused unless t.AllowAnonymous, then
// t.Authorize, if set, decides. A refusal wraps ErrForbidden; a panic of
// Authorize is recovered into one.
func (t Tool) Authorize(ctx context.Context, a Authorization) (err error) {
	if a.Resolver.UserID == "" && !t.AllowAnonymous {
		return fmt.Errorf("%w: an anonymous answer to %s (the scope has no UserID, and the tool does not allow anonymous answers)", ErrForbidden, t.Name)
	}
	if t.Authorizer == nil {
		return nil
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: the authorizer of %s panicked: %v", ErrForbidden, t.Name, p)
		}
	}()
	if err := t.Authorizer(ctx, a); err != nil {
		return fmt.Errorf("%w: %w", ErrForbidden, err)
	}
	return nil
}
