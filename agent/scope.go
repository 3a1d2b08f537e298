package agent

import "slices"

// SystemUserID is the UserID of SystemScope. It is reserved: a Scope with this
// UserID is the system scope, whatever its other fields hold.
const SystemUserID = "system"

// Scope is the caller's ambient state: who is acting, what they may do, and
// any handles the tools need. It is never persisted: it is supplied on every
// entry call (Send, Resolve) and reaches tools through Invocation.Scope.
type Scope struct {
	// UserID identifies the acting user. Empty means no user is known;
	// SystemUserID means the runtime itself.
	UserID string
	// Roles are the user's roles (such as "approver"). With UserID they
	// make the scope's Identity, the part the log records (the requester of
	// a turn, the resolver of a human call) and human tools' authorizers
	// check.
	Roles []string
	// Permissions are opaque names the application's tools check with Has.
	// They are never persisted.
	Permissions []string
	// Values carries application handles (a database pool, a request id).
	// Lazarus never reads or copies them.
	Values map[string]any
}

// SystemScope is the scope the runtime acts with when no caller is present:
// resolutions driven by an expired deadline, and work the runtime resumes on
// its own (after a kill, a restart, an answer) when no ScopeLoader rebuilt
// the requester's scope.
var SystemScope = Scope{UserID: SystemUserID}

// IsSystem reports whether s is the system scope (its UserID is SystemUserID).
func (s Scope) IsSystem() bool { return s.UserID == SystemUserID }

// IsUser reports whether s names a real user: a non-empty UserID that is not
// SystemUserID. Tools marked RequiresUser run only with such a scope.
func (s Scope) IsUser() bool { return s.UserID != "" && !s.IsSystem() }

// HasRole reports whether s holds the named role.
func (s Scope) HasRole(role string) bool { return slices.Contains(s.Roles, role) }

// Has reports whether s holds the named permission.
func (s Scope) Has(permission string) bool { return slices.Contains(s.Permissions, permission) }
