package lazarus

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
)

// logGate ends a Runtime's logging at Close: every logger the Runtime hands
// Options.Logger to (its own, its actors', its actor system's, its Store's)
// goes through one gate, and once shut no record reaches the user's
// handler. Goroutines the Runtime cannot wait for (protoactor's automanaged
// health server, its log throttles, a timer's callback) may log after
// Close returned; the user may read what their handler wrote right then.
type logGate struct {
	// mu is held for reading while a record is written, and for writing
	// by shut: once shut returned, no record is being written.
	mu     sync.RWMutex
	isShut bool
}

// logger is l through g.
func (g *logGate) logger(l *slog.Logger) *slog.Logger {
	return slog.New(gated{l.Handler(), g})
}

// shut drops every record from now on, and waits for one being written.
func (g *logGate) shut() {
	g.mu.Lock()
	g.isShut = true
	g.mu.Unlock()
}

// gated is a handler through a logGate.
type gated struct {
	slog.Handler
	g *logGate
}

func (h gated) Handle(ctx context.Context, r slog.Record) error {
	h.g.mu.RLock()
	defer h.g.mu.RUnlock()
	if h.g.isShut {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h gated) WithAttrs(attrs []slog.Attr) slog.Handler {
	return gated{h.Handler.WithAttrs(attrs), h.g}
}

func (h gated) WithGroup(name string) slog.Handler {
	return gated{h.Handler.WithGroup(name), h.g}
}

// demoted is the slog.Handler of the actor system's logger (component
// protoactor). It lowers records below Warn to Debug: the actor system's
// routine lines (dead letters of stopped conversations, actor starts) are
// diagnostics, not events a user's Info log should carry. Its warnings and
// errors keep their level, except these routine lines of protoactor's
// automanaged cluster provider, matched by their exact message:
//
//   - ERROR "Automanaged server stopping..!" whose error is
//     http.ErrServerClosed (the health endpoint closed by a normal stop)
//     becomes Debug; with any other error it stays an error.
//   - ERROR "Bad connection to the node health status" (one member's
//     health endpoint did not answer a poll: a peer is down, or the member
//     itself is not serving yet at its start) and ERROR "Failure reaching
//     nodes" (no member answered that poll) become Info: the membership
//     change that follows is logged at Info too ("lazarus: cluster
//     membership changed").
type demoted struct{ slog.Handler }

func (h demoted) Enabled(ctx context.Context, l slog.Level) bool {
	return h.Handler.Enabled(ctx, demote(l))
}

func (h demoted) Handle(ctx context.Context, r slog.Record) error {
	r.Level = routine(r)
	// Enabled was asked before the message was known: a lowered record
	// may be below the wrapped handler's level.
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h demoted) WithAttrs(attrs []slog.Attr) slog.Handler {
	return demoted{h.Handler.WithAttrs(attrs)}
}

func (h demoted) WithGroup(name string) slog.Handler {
	return demoted{h.Handler.WithGroup(name)}
}

func demote(l slog.Level) slog.Level {
	if l < slog.LevelWarn {
		return slog.LevelDebug
	}
	return l
}

// routine is the level r is logged at: demote's, or lower for the known
// routine errors listed on demoted.
func routine(r slog.Record) slog.Level {
	if r.Level != slog.LevelError {
		return demote(r.Level)
	}
	switch r.Message {
	case "Automanaged server stopping..!":
		closed := false
		r.Attrs(func(a slog.Attr) bool {
			if err, ok := a.Value.Any().(error); ok && a.Key == "error" {
				closed = errors.Is(err, http.ErrServerClosed)
			}
			return true
		})
		if closed {
			return slog.LevelDebug
		}
	case "Bad connection to the node health status", "Failure reaching nodes":
		return slog.LevelInfo
	}
	return r.Level
}
