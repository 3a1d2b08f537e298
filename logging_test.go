package lazarus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
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

// TestNoLogAfterClose: once Close returned, nothing the Runtime's actor
// system or the Runtime itself logs reaches Options.Logger (the
// automanaged provider's server goroutine logs its stop after the cluster
// shut down): a logger writing to a buffer the caller reads after Close
// sees no write after it.
func TestNoLogAfterClose(t *testing.T) {
	var buf bytes.Buffer
	rt, err := Open(Options{Model: okModel(), IdleTimeout: -1,
		Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	require.NoError(t, err)
	rt.log.Debug("before close")
	require.NoError(t, rt.Close())
	closed := buf.String()
	require.Contains(t, closed, "before close", "the Runtime logs to Options.Logger")

	rt.system.Logger().Error("Automanaged server stopping..!", slog.Any("error", errors.New("late")))
	rt.system.Logger().With("k", "v").WithGroup("g").Warn("late")
	rt.log.Error("late")
	rt.opts.Logger.With("k", "v").Error("late")
	require.Equal(t, closed, buf.String(), "a record was written after Close returned")
}

// TestCloseWaitsForARecordBeingWritten: a record the actor system is
// writing when Close runs is written before Close returns, not during or
// after it.
func TestCloseWaitsForARecordBeingWritten(t *testing.T) {
	var buf bytes.Buffer
	entered, release := make(chan struct{}), make(chan struct{})
	h := holdHandler{Handler: slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}), hold: "slow", entered: entered, release: release}
	rt, err := Open(Options{Model: okModel(), IdleTimeout: -1, Logger: slog.New(h)})
	require.NoError(t, err)
	go rt.system.Logger().Warn("slow")
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the record never reached the handler")
	}
	closed := make(chan error, 1)
	go func() { closed <- rt.Close() }()
	select {
	case <-closed:
		t.Fatal("Close returned while a record was being written")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return once the record was written")
	}
	require.Contains(t, buf.String(), "msg=slow")
}

// holdHandler holds the record of message hold until release is closed,
// after closing entered.
type holdHandler struct {
	slog.Handler
	hold             string
	entered, release chan struct{}
}

func (h holdHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.hold {
		close(h.entered)
		<-h.release
	}
	return h.Handler.Handle(ctx, r)
}

func (h holdHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return holdHandler{h.Handler.WithAttrs(attrs), h.hold, h.entered, h.release}
}

func (h holdHandler) WithGroup(name string) slog.Handler {
	return holdHandler{h.Handler.WithGroup(name), h.hold, h.entered, h.release}
}

func okModel() agent.Model {
	return agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	})
}
