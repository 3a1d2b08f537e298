package lazarus

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
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

// TestRoutineClusterErrorsAreLowered: the automanaged provider's error
// lines of a normal start and stop (its health endpoint closed, a health
// poll that reached no one) are not errors in the user's log; the same
// messages with another cause, and other errors, stay errors.
func TestRoutineClusterErrorsAreLowered(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(demoted{slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})}).With("component", "protoactor")
	dial := errors.New(`Get "http://127.0.0.1:7101/_health": dial tcp 127.0.0.1:7101: connect: connection refused`)
	cases := []struct {
		name string
		log  func()
		want string
	}{
		{"server closed", func() {
			log.Error("Automanaged server stopping..!", slog.Any("error", http.ErrServerClosed))
		}, "level=DEBUG"},
		{"server closed, wrapped", func() {
			log.Error("Automanaged server stopping..!", slog.Any("error", fmt.Errorf("echo: %w", http.ErrServerClosed)))
		}, "level=DEBUG"},
		{"server failed", func() {
			log.Error("Automanaged server stopping..!", slog.Any("error", errors.New("listen tcp 0.0.0.0:7101: bind: address already in use")))
		}, "level=ERROR"},
		{"health poll", func() {
			log.Error("Bad connection to the node health status", slog.Any("error", dial), slog.String("autoManMemberUrl", "http://127.0.0.1:7101/_health"))
		}, "level=INFO"},
		{"no member reached", func() {
			log.Error("Failure reaching nodes", slog.Any("error", dial))
		}, "level=INFO"},
		{"bad health response", func() {
			log.Error("Bad response from the node health status", slog.Any("error", errors.New("non 200 status returned: 500")))
		}, "level=ERROR"},
		{"same message at warn", func() {
			log.Warn("Failure reaching nodes", slog.Any("error", dial))
		}, "level=WARN"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			buf.Reset()
			c.log()
			require.Contains(t, buf.String(), c.want)
			require.Contains(t, buf.String(), "component=protoactor")
		})
	}

	// At a Warn level (lazarus-node's stderr) the lowered lines are not
	// written at all.
	var warn bytes.Buffer
	atWarn := slog.New(demoted{slog.NewTextHandler(&warn, &slog.HandlerOptions{Level: slog.LevelWarn})})
	atWarn.Error("Automanaged server stopping..!", slog.Any("error", http.ErrServerClosed))
	atWarn.Error("Bad connection to the node health status", slog.Any("error", dial))
	atWarn.Error("Failure reaching nodes", slog.Any("error", dial))
	require.Empty(t, warn.String())
	atWarn.Error("Automanaged server stopping..!", slog.Any("error", errors.New("bind: address already in use")))
	require.Contains(t, warn.String(), "level=ERROR")
}
