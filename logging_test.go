package lazarus

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestActorSystemLinesAreDebug(t *testing.T) {
	var info, debug bytes.Buffer
	atInfo := slog.New(demoted{slog.NewTextHandler(&info, &slog.HandlerOptions{Level: slog.LevelInfo})})
	atDebug := slog.New(demoted{slog.NewTextHandler(&debug, &slog.HandlerOptions{Level: slog.LevelDebug})}).With("component", "protoactor")

	atInfo.Info("[DeadLetter]", "pid", "lazarus/conv-3")
	require.Empty(t, info.String(), "an Info line of the actor system reaches an Info logger")
	atInfo.Warn("mailbox overflow")
	require.Contains(t, info.String(), "level=WARN")
	require.Contains(t, info.String(), "mailbox overflow")

	atDebug.Info("[DeadLetter]", "pid", "lazarus/conv-3")
	require.Contains(t, debug.String(), "level=DEBUG")
	require.Contains(t, debug.String(), "component=protoactor")
	require.NotContains(t, debug.String(), "level=INFO")
}
