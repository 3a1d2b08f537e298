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
	// Permissions are opaque names the application's tools check with Has.
	Permissions []string
	// Values carries application handles (a database pool, a request id).
	// Lazarus never reads or copies them.
	Values map[string]any
}

// SystemScope is the scope the runtime acts with when no caller is present:
// resolutions driven by an expired deadline, and recovery after a revival
// re-dispatches a server tool call whose original caller is gone.
var SystemScope = Scope{UserID: SystemUserID}

// IsSystem reports whether s is the system scope (its UserID is SystemUserID).
func (s Scope) IsSystem() bool { return s.UserID == SystemUserID }

// IsUser reports whether s names a real user: a non-empty UserID that is not
// SystemUserID. Tools marked RequiresUser run only with such a scope.
func (s Scope) IsUser() bool { return s.UserID != "" && !s.IsSystem() }

// Has reports whether s holds the named permission.
func (s Scope) Has(permission string) bool { return slices.Contains(s.Permissions, permission) }
