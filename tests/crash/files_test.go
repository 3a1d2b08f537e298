package crash

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
	"github.com/lazarusrt/lazarus/messages"
)

// editTool records a.txt through the call's checkpointer, overwrites it,
// then calls after (the child reports and waits there to be killed).
func editTool(root string, after func(ctx context.Context)) agent.Tool {
	return agent.Tool{
		Name: "edit", Description: "overwrite a.txt", Executor: messages.Executor_EXECUTOR_SERVER,
		Run: func(ctx context.Context, inv agent.Invocation) (string, error) {
			if err := inv.CheckpointFile(ctx, "a.txt"); err != nil {
				return "", err
			}
			if err := os.WriteFile(filepath.Join(root, "a.txt"), []byte("edited by "+inv.ToolCallID), 0o644); err != nil {
				return "", err
			}
			after(ctx)
			return `{"edited":true}`, nil
		},
	}
}

func filesOptions(cfg childConfig, model agent.Model, tool agent.Tool) lazarus.Options {
	return lazarus.Options{
		Dir: cfg.Dir, Postgres: cfg.Postgres, Model: model, Tools: []agent.Tool{tool},
		Files: lazarus.FilesOptions{Root: cfg.FilesRoot},
	}
}

// filesChild runs one turn whose tool changes a.txt, reports "wrote" once
// the file is changed (its result not yet written) and waits to be killed.
func filesChild(t *testing.T, cfg childConfig, rep *reporter) {
	model := scripted.New(scripted.Options{})
	model.Push("f", scripted.Reply("editing", scripted.Call("edit", `{}`)))
	rt, err := lazarus.Open(filesOptions(cfg, model, editTool(cfg.FilesRoot, func(ctx context.Context) {
		rep.line("wrote")
		<-ctx.Done() // never, before the kill
	})))
	if err != nil {
		rep.line("err open: %v", err)
		t.Fatalf("open: %v", err)
	}
	if _, err := rt.Send(context.Background(), "f", "edit a.txt", agent.Scope{UserID: "u"}); err != nil {
		rep.line("err send: %v", err)
		t.Fatalf("send: %v", err)
	}
	select {}
}

// TestKill9FileRestore: a child process's tool records a file and changes
// it, and the child is killed with SIGKILL before the tool's result is
// written. The checkpoint survives; the revived runtime runs the tool
// again (its second record of the file is not kept) and a rewind with
// Files puts the file back as it was before the first run. On Pebble and
// PostgreSQL.
func TestKill9FileRestore(t *testing.T) {
	t.Run("pebble", func(t *testing.T) {
		testKill9FileRestore(t, childConfig{Dir: filepath.Join(t.TempDir(), "db")})
	})
	t.Run("postgres", func(t *testing.T) {
		srv, err := pgtest.Start()
		require.NoError(t, err)
		t.Cleanup(func() { _ = srv.Close() })
		testKill9FileRestore(t, childConfig{Postgres: srv.NewDatabase(t)})
	})
}

func testKill9FileRestore(t *testing.T, cfg childConfig) {
	cfg.Mode = modeFiles
	cfg.FilesRoot = t.TempDir()
	original := []byte("the original")
	require.NoError(t, os.WriteFile(filepath.Join(cfg.FilesRoot, "a.txt"), original, 0o644))

	cmd, err := childCommand(cfg)
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := &tailBuffer{max: 16 << 10}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	wrote := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == linePrefix+"wrote" {
				wrote <- true
				break
			}
		}
		close(wrote)
		for sc.Scan() { // drain until the child is gone
		}
	}()
	bound := time.NewTimer(2 * time.Minute)
	defer bound.Stop()
	select {
	case ok := <-wrote:
		if !ok {
			_ = cmd.Wait()
			t.Fatalf("the child ended before its tool wrote; stderr:\n%s", stderr.String())
		}
	case <-bound.C:
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		t.Fatalf("the child's tool did not write; stderr:\n%s", stderr.String())
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	edited, err := os.ReadFile(filepath.Join(cfg.FilesRoot, "a.txt"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(edited), "edited by "), "the kill came after the write")

	// What the kill left: the record of the original content, no result.
	s, err := openChildStore(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cps, err := s.(journal.FileCheckpoints).FileCheckpoints(ctx, "f", 0)
	require.NoError(t, err)
	require.Len(t, cps, 1)
	sum := sha256.Sum256(original)
	require.Equal(t, hex.EncodeToString(sum[:]), cps[0].GetSha256(), "the checkpoint holds the content before the write")
	evs, err := s.Events(ctx, "f", journal.EventQuery{})
	require.NoError(t, err)
	for _, ev := range evs {
		require.Nil(t, ev.GetToolResult(), "the kill came before the result")
	}
	require.NoError(t, s.Close())

	// Revive: the pending call runs again, the turn ends.
	model := scripted.New(scripted.Options{})
	model.Push("f", scripted.Text("done"))
	reran := make(chan struct{}, 1)
	rt, err := lazarus.Open(filesOptions(cfg, model, editTool(cfg.FilesRoot, func(context.Context) {
		select {
		case reran <- struct{}{}:
		default:
		}
	})))
	require.NoError(t, err)
	defer func() { require.NoError(t, rt.Close()) }()
	sub, err := rt.Subscribe(ctx, "f", 0)
	require.NoError(t, err)
	for u := range sub {
		if am := u.Event.GetAssistantMsg(); am != nil && len(am.GetToolCalls()) == 0 {
			break
		}
	}
	require.NoError(t, ctx.Err(), "the revived turn ends")
	require.Len(t, reran, 1, "the revived runtime ran the tool again")
	again, err := os.ReadFile(filepath.Join(cfg.FilesRoot, "a.txt"))
	require.NoError(t, err)
	require.Equal(t, string(edited), string(again), "it ran under the same tool call id (the tool writes its id)")
	cps, err = rt.Store().(journal.FileCheckpoints).FileCheckpoints(ctx, "f", 0)
	require.NoError(t, err)
	require.Len(t, cps, 1, "the re-run's record of the changed file is not kept")

	rep, err := rt.RewindWithReport(ctx, "f", 1, lazarus.RewindOptions{Files: true}, agent.Scope{UserID: "u"})
	require.NoError(t, err)
	require.Equal(t, []lazarus.FileRestore{{Path: "a.txt", Action: lazarus.FileRestored, Seq: cps[0].GetSeq(), Size: int64(len(original))}}, rep.Files)
	got, err := os.ReadFile(filepath.Join(cfg.FilesRoot, "a.txt"))
	require.NoError(t, err)
	require.Equal(t, string(original), string(got))
}
