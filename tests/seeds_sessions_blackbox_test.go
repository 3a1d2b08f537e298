package tests

// Black-box tests of edge cases the session seeds (ExAthena, Planck,
// SkillKit) name, through the public API: chapters paged backwards while
// the conversation goes on (no duplicate, no gap), an edit that meets a
// server tool still running (its call is no longer owed), a rewind to a
// user message (no turn owed, across a restart), file rewinds to the very
// start and across a file and a directory of one name, an ended
// conversation's checkpoints, and one agent's view of a handoff in pages.

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/actors/actorstest"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestSeedsChaptersPagedWhileAppending: Planck's checkpoint-anchored
// pagination. While another caller keeps sending (and summaries keep
// landing), paging Chapters from the newest back to the first returns, for
// each full walk, every seq from 1 to the first page's end exactly once, in
// order: no duplicate and no gap across pages, whatever was appended or
// summarized between them.
func TestSeedsChaptersPagedWhileAppending(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), summarizing)
		ctx := ctxT(t)
		for i := 0; i < 4; i++ {
			h.model.Push("c", scripted.Text("warm"))
			_, err := h.rt.SendAndWait(ctx, "c", "warm up", user)
			require.NoError(t, err)
		}
		const turns = 12
		done := make(chan struct{})
		var wg sync.WaitGroup
		var sendErr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done)
			for i := 0; i < turns; i++ {
				h.model.Push("c", scripted.Text("more"))
				if _, err := h.rt.SendAndWait(ctx, "c", "more", user); err != nil {
					sendErr = err
					return
				}
			}
		}()
		// Walk until the sender is done, and once more after.
		for walks, last := 0, false; !last; walks++ {
			select {
			case <-done:
				last = true
			default:
			}
			var seqs []uint64
			before := uint64(0)
			var end uint64
			for page := 0; ; page++ {
				require.Less(t, page, 1000, "the walk ends")
				ch, err := h.rt.Chapters(ctx, "c", before)
				require.NoError(t, err)
				require.NotEmpty(t, ch.Events, "walk %d page %d (before %d)", walks, page, before)
				if page == 0 {
					end = ch.Events[len(ch.Events)-1].GetSeq()
				} else {
					require.Equal(t, before-1, ch.Events[len(ch.Events)-1].GetSeq(), "a page ends just before the cursor")
				}
				require.Equal(t, ch.Summary.GetToSeq()+1, ch.Events[0].GetSeq(), "a page starts after its summary")
				seqs = append(seqsOf(ch.Events), seqs...)
				if ch.Prev == 0 {
					require.Nil(t, ch.Summary, "the walk ends at the first chapter")
					break
				}
				before = ch.Prev
			}
			require.Len(t, seqs, int(end), "walk %d: every seq up to %d once", walks, end)
			for i, s := range seqs {
				require.Equal(t, uint64(i+1), s, "walk %d: no gap, no duplicate", walks)
			}
		}
		wg.Wait()
		require.NoError(t, sendErr)
		requireGapFree(t, h.history("c"))
	})
}

// TestSeedsEditMeetsARunningServerTool: Planck's truncate for editing an
// earlier message, while a server tool of the turn it replaces is still
// running. The edit cancels the call in its write (errored, code
// canceled), so the conversation no longer owes its result: when the run
// returns, its result is not appended, the model is not called for it, and
// the new message's turn sees neither the call nor its result.
func TestSeedsEditMeetsARunningServerTool(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		h.chargeGate = make(chan struct{})
		h.model.Push("e", scripted.Reply("charging", scripted.Call("charge", `{"amount":5}`)))
		_, err := h.rt.Send(ctx, "e", "charge me", user)
		require.NoError(t, err)
		var callID string
		select {
		case callID = <-h.chargeStarted:
		case <-ctx.Done():
			t.Fatal("the charge never started")
		}
		h.model.Push("e", scripted.Text("edited answer"))
		newSeq, err := h.rt.Edit(ctx, "e", 1, "do not charge me", user)
		require.NoError(t, err)
		h.awaitEvent("e", newSeq, isAssistantText("edited answer"))
		close(h.chargeGate) // the run, if it still runs, returns now

		row, err := h.store.ToolCall(ctx, callID)
		require.NoError(t, err)
		require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED, row.GetStatus(), "the edit cancelled the call")
		require.Equal(t, agent.CodeCanceled, row.GetResult().GetError().GetCode())

		turns := h.model.Turns("e")
		last := turns[len(turns)-1]
		require.Equal(t, []string{"do not charge me"}, userTexts(last.Context))
		for _, ev := range last.Context {
			require.Nil(t, ev.GetToolCall(), "the edited turn sees no call of the old one")
			require.Nil(t, ev.GetToolResult(), "nor its result")
		}
		// Nothing more comes of the old call: a Wake owes no turn, and the
		// log after the edit's answer holds nothing of the call.
		calls := len(h.model.Turns("e"))
		require.NoError(t, h.rt.Wake(ctx, "e"))
		require.True(t, h.rt.Kill("e"))
		require.NoError(t, h.rt.Wake(ctx, "e"))
		require.Equal(t, calls, len(h.model.Turns("e")), "no model call for the cancelled call")
		entries, err := h.rt.HistoryView(ctx, "e", lazarus.HistoryOptions{Effective: true})
		require.NoError(t, err)
		for _, e := range entries {
			require.NotEqual(t, callID, e.Event.GetToolResult().GetToolCallId(), "no result of the cancelled call on the head")
			require.NotEqual(t, callID, e.Event.GetToolCall().GetCall().GetId(), "no call of the old turn on the head")
		}
	})
}

// TestSeedsFileRewindToTheStart: ExAthena's code_and_history rewind to the
// first event. A rewind to seq 0 with Files puts every file the tools
// touched back as it was before the conversation's first change: a file
// changed twice gets its first content byte for byte, one created is
// removed, one deleted comes back.
func TestSeedsFileRewindToTheStart(t *testing.T) {
	h, root := filesHarness(t, openStore(t, "memory"), nil, nil)
	ctx := ctxT(t)
	orig := "line one\r\nline two\x00\xff tail"
	require.NoError(t, os.WriteFile(filepath.Join(root, "a.txt"), []byte(orig), 0o640))
	require.NoError(t, os.WriteFile(filepath.Join(root, "gone.txt"), []byte("was here"), 0o600))
	h.model.Push("f",
		scripted.Reply("edit", writeCall(fileArgs{Path: "a.txt", Content: "v2"}), writeCall(fileArgs{Path: "new/n.txt", Content: "n"})),
		scripted.Reply("again", writeCall(fileArgs{Path: "a.txt", Content: "v3"}), writeCall(fileArgs{Path: "gone.txt", Delete: true})),
		scripted.Text("done"))
	_, err := h.rt.SendAndWait(ctx, "f", "edit", user)
	require.NoError(t, err)
	require.Equal(t, "v3", readFile(t, root, "a.txt"))

	rep, err := h.rt.RewindWithReport(ctx, "f", 0, lazarus.RewindOptions{Files: true}, user)
	require.NoError(t, err)
	require.Len(t, rep.Files, 3)
	require.Equal(t, orig, readFile(t, root, "a.txt"), "the content before the first change, byte for byte")
	require.Equal(t, "was here", readFile(t, root, "gone.txt"))
	require.Equal(t, "<absent>", readFile(t, root, "new/n.txt"), "a file created after the target is removed")
	info, err := os.Stat(filepath.Join(root, "a.txt"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o640), info.Mode().Perm())
	entries, err := h.rt.HistoryView(ctx, "f", lazarus.HistoryOptions{Effective: true})
	require.NoError(t, err)
	require.Empty(t, entries, "the whole history left the head")

	// The conversation starts over from nothing.
	h.model.Push("f", scripted.Text("fresh"))
	end, err := h.rt.SendAndWait(ctx, "f", "start over", user)
	require.NoError(t, err)
	require.Equal(t, "fresh", end.Text)
	turns := h.model.Turns("f")
	require.Equal(t, []string{"start over"}, userTexts(turns[len(turns)-1].Context))
}

// TestSeedsAgentViewPagesAcrossAHandoff: Planck's per-agent filtering
// with a handoff. Paging one agent's HistoryView backwards (Before, Limit)
// gives, page by page, exactly that agent's full view once, and the
// critic's view holds the handoff it was passed.
func TestSeedsAgentViewPagesAcrossAHandoff(t *testing.T) {
	h := newHarness(t, openStore(t, "memory"), func(o *lazarus.Options) {
		o.Agents = []lazarus.Agent{{Name: "critic"}}
	})
	ctx := ctxT(t)
	h.model.Push("m",
		scripted.Reply("passing", scripted.Call("handoff", `{"agent":"critic","message":"review this"}`)),
		scripted.Text("critic says fine"),
		scripted.Text("default again"))
	end, err := h.rt.SendAndWait(ctx, "m", "draft", user)
	require.NoError(t, err)
	h.awaitEvent("m", end.Seq-1, isAssistantText("critic says fine"))
	_, err = h.rt.SendAndWait(ctx, "m", "next", user)
	require.NoError(t, err)

	for _, name := range []string{"", "critic"} {
		all, err := h.rt.HistoryView(ctx, "m", lazarus.HistoryOptions{Agent: lazarus.ViewOf(name)})
		require.NoError(t, err)
		require.NotEmpty(t, all)
		for limit := 1; limit <= len(all)+1; limit++ {
			var got []uint64
			before := uint64(0)
			for {
				page, err := h.rt.HistoryView(ctx, "m", lazarus.HistoryOptions{Agent: lazarus.ViewOf(name), Before: before, Limit: limit})
				require.NoError(t, err)
				if len(page) == 0 {
					break
				}
				require.LessOrEqual(t, len(page), limit)
				var seqs []uint64
				for _, e := range page {
					seqs = append(seqs, e.Event.GetSeq())
				}
				got = append(seqs, got...)
				before = seqs[0]
			}
			var want []uint64
			for _, e := range all {
				want = append(want, e.Event.GetSeq())
			}
			require.Equal(t, want, got, "agent %q, limit %d", name, limit)
		}
	}
	critic, err := h.rt.HistoryView(ctx, "m", lazarus.HistoryOptions{Agent: lazarus.ViewOf("critic")})
	require.NoError(t, err)
	var handoff bool
	for _, e := range critic {
		if e.Event.GetHandoff() != nil {
			handoff = true
		}
		require.False(t, isAssistantText("default again")(e.Event), "the default agent's own answer is not in the critic's view")
	}
	require.True(t, handoff, "the critic sees the handoff it was passed")
}

// TestSeedsRewindToAUserMessageOwesNoTurn: Planck's truncate, then the
// caller prompts again. A rewind whose target is a user message leaves a
// head ending in that message, and owes no turn (Rewind's doc): neither a
// Wake after a kill nor a restart of the runtime on the same directory
// calls the model for it, and the conversation is at rest (End succeeds).
func TestSeedsRewindToAUserMessageOwesNoTurn(t *testing.T) {
	dir := t.TempDir()
	ctx := ctxT(t)
	open := func(m *scripted.Model) *lazarus.Runtime {
		rt, err := lazarus.Open(lazarus.Options{Dir: dir, Model: m, IdleTimeout: -1})
		require.NoError(t, err)
		return rt
	}
	m1 := scripted.New(scripted.Options{})
	m1.Push("t", scripted.Text("one"), scripted.Text("two"))
	rt := open(m1)
	_, err := rt.SendAndWait(ctx, "t", "first", user) // 1, 2
	require.NoError(t, err)
	_, err = rt.SendAndWait(ctx, "t", "second", user) // 3, 4
	require.NoError(t, err)
	require.NoError(t, rt.Rewind(ctx, "t", 3, lazarus.RewindOptions{}, user)) // 5: the head ends in "second"
	calls := len(m1.Turns("t"))
	require.True(t, rt.Kill("t"))
	require.NoError(t, rt.Wake(ctx, "t"))
	require.Equal(t, calls, len(m1.Turns("t")), "a wake after the kill owes no turn")
	require.NoError(t, rt.Close())

	m2 := scripted.New(scripted.Options{})
	rt = open(m2)
	t.Cleanup(func() { _ = rt.Close() })
	require.NoError(t, rt.Wake(ctx, "t"))
	// End is refused while a turn runs or is owed: it succeeding says
	// none is.
	require.NoError(t, rt.End(ctx, "t"), "a restart owes no turn either")
	require.Empty(t, m2.Turns("t"))
	evs, err := rt.History(ctx, "t", 0, 0)
	require.NoError(t, err)
	requireGapFree(t, evs)
	require.Len(t, evs, 5, "the four kept and the rewind; nothing after")
	require.Equal(t, uint64(3), evs[4].GetRewind().GetToSeq())
}

// TestSeedsEndedConversationKeepsItsCheckpointsUntilDeleted: ExAthena's
// sweeper removes file history by age; ours removes only the blobs no
// checkpoint names. An ended conversation keeps its checkpoints and their
// blobs (the sweeper, past any TTL, takes none), its rewinds are refused
// with journal.ErrEnded and leave the files; deleting it frees them for
// the next sweep.
func TestSeedsEndedConversationKeepsItsCheckpointsUntilDeleted(t *testing.T) {
	h, root := filesHarness(t, openStore(t, "memory"), nil, func(o *lazarus.Options) {
		o.Files.BlobTTL = time.Nanosecond
	})
	ctx := ctxT(t)
	require.NoError(t, os.WriteFile(filepath.Join(root, "a.txt"), []byte("before"), 0o644))
	h.model.Push("x", scripted.Reply("", writeCall(fileArgs{Path: "a.txt", Content: "after"})), scripted.Text("done"))
	_, err := h.rt.SendAndWait(ctx, "x", "go", user)
	require.NoError(t, err)
	require.NoError(t, h.rt.End(ctx, "x"))

	h.clock.Advance(time.Hour) // sweeps, past the TTL
	n, err := h.rt.SweepFileBlobs(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "an ended conversation's checkpoints still name their blobs")
	_, err = h.rt.RewindWithReport(ctx, "x", 0, lazarus.RewindOptions{Files: true}, user)
	require.ErrorIs(t, err, journal.ErrEnded)
	require.Equal(t, "after", readFile(t, root, "a.txt"), "a refused rewind restores nothing")

	require.NoError(t, h.rt.Delete(ctx, "x"))
	n, err = h.rt.SweepFileBlobs(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "deleted, its blob goes")
}

// TestSeedsFileRewindAcrossAFileAndADirectoryOfOneName: ExAthena's rewind
// restores every checkpointed file. A file that the tools replaced with a
// directory of files after the target comes back byte for byte (the files
// made in the directory go, then the directory), and a directory of files
// that the tools replaced with a file comes back (the file goes, then the
// directory's files return); a directory holding a file no checkpoint
// recorded is left as it is, and the restore fails.
func TestSeedsFileRewindAcrossAFileAndADirectoryOfOneName(t *testing.T) {
	h, root := filesHarness(t, openStore(t, "memory"), nil, nil)
	ctx := ctxT(t)
	require.NoError(t, os.WriteFile(filepath.Join(root, "x"), []byte("file x"), 0o640))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "d"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "d", "f"), []byte("in d"), 0o600))
	h.model.Push("f",
		scripted.Reply("remove", writeCall(fileArgs{Path: "x", Delete: true}), writeCall(fileArgs{Path: "d/f", Delete: true})),
		scripted.Text("removed"))
	_, err := h.rt.SendAndWait(ctx, "f", "remove", user) // 1-8
	require.NoError(t, err)
	require.NoError(t, os.Remove(filepath.Join(root, "d"))) // by hand: "d" is an empty directory, not a file
	h.model.Push("f",
		scripted.Reply("replace", writeCall(fileArgs{Path: "x/y", Content: "inner"}), writeCall(fileArgs{Path: "d", Content: "file d"})),
		scripted.Text("replaced"))
	_, err = h.rt.SendAndWait(ctx, "f", "replace", user)
	require.NoError(t, err)
	require.Equal(t, "inner", readFile(t, root, "x/y"))
	require.Equal(t, "file d", readFile(t, root, "d"))

	rep, err := h.rt.RewindWithReport(ctx, "f", 0, lazarus.RewindOptions{Files: true}, user)
	require.NoError(t, err)
	var got []string
	for _, f := range rep.Files {
		got = append(got, f.Path+" "+string(f.Action))
	}
	require.Equal(t, []string{"d deleted", "d/f created", "x created", "x/y deleted"}, got, "in path order")
	require.Equal(t, "file x", readFile(t, root, "x"), "the file comes back in the directory's place")
	info, err := os.Stat(filepath.Join(root, "x"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o640), info.Mode())
	require.Equal(t, "in d", readFile(t, root, "d/f"), "the directory's file comes back in the file's place")

	// Again, in another conversation, with a file no tool recorded in the
	// directory: it stays.
	require.NoError(t, os.WriteFile(filepath.Join(root, "z"), []byte("file z"), 0o644))
	h.model.Push("g",
		scripted.Reply("rm", writeCall(fileArgs{Path: "z", Delete: true})),
		scripted.Reply("mk", writeCall(fileArgs{Path: "z/y", Content: "inner"})),
		scripted.Text("done"))
	_, err = h.rt.SendAndWait(ctx, "g", "again", user)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(root, "z", "mine"), []byte("by hand"), 0o644))
	_, err = h.rt.RewindWithReport(ctx, "g", 0, lazarus.RewindOptions{Files: true}, user)
	require.ErrorContains(t, err, `restore "z"`)
	require.Equal(t, "by hand", readFile(t, root, "z/mine"), "a file no checkpoint recorded is never removed")
}

// TestSeedsBlobSweepRunsWhenTheRuntimeOpens: ExAthena's sweeper runs at
// boot. A blob left without a checkpoint (its conversation deleted) by a
// process that closed before its sweep was due is swept by the next
// Runtime on the directory as it opens, before BlobTTL/2 passed on its
// clock; one a checkpoint still names stays.
func TestSeedsBlobSweepRunsWhenTheRuntimeOpens(t *testing.T) {
	dir, root := t.TempDir(), t.TempDir()
	ctx := ctxT(t)
	sumOf := func(s string) string { b := sha256.Sum256([]byte(s)); return hex.EncodeToString(b[:]) }
	open := func(m *scripted.Model, clock lazarus.Clock) *lazarus.Runtime {
		rt, err := lazarus.Open(lazarus.Options{
			Dir: dir, Model: m, Clock: clock, IdleTimeout: -1,
			Tools: []agent.Tool{writeFileTool(root, nil)},
			Files: lazarus.FilesOptions{Root: root, BlobTTL: time.Nanosecond},
		})
		require.NoError(t, err)
		return rt
	}
	m := scripted.New(scripted.Options{})
	clock := actorstest.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
	rt := open(m, clock)
	require.NoError(t, os.WriteFile(filepath.Join(root, "gone.txt"), []byte("of the deleted"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "kept.txt"), []byte("of the kept"), 0o644))
	for conv, path := range map[string]string{"gone": "gone.txt", "kept": "kept.txt"} {
		m.Push(conv, scripted.Reply("", writeCall(fileArgs{Path: path, Content: "x"})), scripted.Text("done"))
		_, err := rt.SendAndWait(ctx, conv, "go", user)
		require.NoError(t, err)
	}
	require.NoError(t, rt.Delete(ctx, "gone"))
	require.NoError(t, rt.Close()) // before any sweep was due

	clock = actorstest.NewManualClock(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
	rt = open(scripted.New(scripted.Options{}), clock)
	t.Cleanup(func() { _ = rt.Close() })
	clock.Advance(0) // runs what is due now, synchronously; the periodic sweep is not
	fc := rt.Store().(journal.FileCheckpoints)
	_, err := fc.FileBlob(ctx, sumOf("of the deleted"))
	require.ErrorIs(t, err, journal.ErrNotFound, "swept as the runtime opened")
	_, err = fc.FileBlob(ctx, sumOf("of the kept"))
	require.NoError(t, err, "a blob a checkpoint names stays")
}

// TestSeedsEditLeavesTheFiles: ExAthena's history_only mode. An Edit
// rewinds the history only: the files a tool changed after the edited
// message keep their content, and their checkpoints stay, so a later
// rewind with Files to before that message still puts them back.
func TestSeedsEditLeavesTheFiles(t *testing.T) {
	h, root := filesHarness(t, openStore(t, "memory"), nil, nil)
	ctx := ctxT(t)
	require.NoError(t, os.WriteFile(filepath.Join(root, "a.txt"), []byte("v1"), 0o644))
	h.model.Push("f", scripted.Reply("", writeCall(fileArgs{Path: "a.txt", Content: "v2"})), scripted.Text("done"))
	_, err := h.rt.SendAndWait(ctx, "f", "edit a", user)
	require.NoError(t, err)
	h.model.Push("f", scripted.Text("edited"))
	newSeq, err := h.rt.Edit(ctx, "f", 1, "leave a", user)
	require.NoError(t, err)
	h.awaitEvent("f", newSeq, isAssistantText("edited"))
	require.Equal(t, "v2", readFile(t, root, "a.txt"), "an edit leaves the files")

	rep, err := h.rt.RewindWithReport(ctx, "f", 0, lazarus.RewindOptions{Files: true}, user)
	require.NoError(t, err)
	require.Len(t, rep.Files, 1)
	require.Equal(t, "v1", readFile(t, root, "a.txt"))
}

// TestSeedsEditWhileDeadDoesNotRerunTheToolItCancels: a server tool's run
// is cut by a kill, so its call has no result and a revival would run it
// again with the same id. An Edit of the message that led to it, sent
// while the conversation is dead, revives it and cancels the call in its
// write: the tool is not run again, and the new turn sees none of it.
func TestSeedsEditWhileDeadDoesNotRerunTheToolItCancels(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		// No resume scan: it would revive the killed conversation on its own
		// (it is mid-turn) and run the tool again before the edit.
		h := newHarness(t, openStore(t, kind), func(o *lazarus.Options) { o.NoResume = true })
		ctx := ctxT(t)
		h.chargeGate = make(chan struct{})
		defer close(h.chargeGate)
		h.model.Push("e", scripted.Reply("charging", scripted.Call("charge", `{"amount":5}`)))
		_, err := h.rt.Send(ctx, "e", "charge me", user)
		require.NoError(t, err)
		var callID string
		select {
		case callID = <-h.chargeStarted:
		case <-ctx.Done():
			t.Fatal("the charge never started")
		}
		require.True(t, h.rt.Kill("e"))
		require.Eventually(t, func() bool { return !h.rt.IsActive("e") }, wait, time.Millisecond)

		h.model.Push("e", scripted.Text("nothing charged"))
		newSeq, err := h.rt.Edit(ctx, "e", 1, "do not charge me", user)
		require.NoError(t, err)
		h.awaitEvent("e", newSeq, isAssistantText("nothing charged"))
		require.Equal(t, []string{callID}, h.runs.of("charge"), "the cancelled call is not run again")
		row, err := h.store.ToolCall(ctx, callID)
		require.NoError(t, err)
		require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED, row.GetStatus())
		require.Equal(t, agent.CodeCanceled, row.GetResult().GetError().GetCode())
	})
}
