package lazarus

import (
	"context"
	"log/slog"
)

// demoted is a slog.Handler that lowers records below Warn to Debug. The
// actor system's routine lines (dead letters of stopped conversations,
// actor starts) are diagnostics, not events a user's Info log should carry;
// its warnings and errors keep their level.
type demoted struct{ slog.Handler }

func (h demoted) Enabled(ctx context.Context, l slog.Level) bool {
	return h.Handler.Enabled(ctx, demote(l))
}

func (h demoted) Handle(ctx context.Context, r slog.Record) error {
	r.Level = demote(r.Level)
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
