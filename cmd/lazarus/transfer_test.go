package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
)

// noWrites is an import target that must never be opened for writing: the
// first pass finds no store, and the test fails if a second pass starts.
func noWrites(t testing.TB) func(bool) (journal.Store, error) {
	return func(create bool) (journal.Store, error) {
		if create {
			t.Errorf("the import opened the target for writing")
			return nil, errors.New("test: no writes")
		}
		return nil, errNoStore
	}
}

// TestImportRefusesEveryCut: an export cut anywhere, at any byte or line,
// is refused with an error wrapping errTruncated (and journal.ErrInvalid),
// and nothing is written.
func TestImportRefusesEveryCut(t *testing.T) {
	f := newFixture(t)
	all := exportOf(t, f, "answered", "finished", "waiting")
	lines := outLines(all)
	require.Greater(t, len(lines), 30)

	t.Run("every line boundary", func(t *testing.T) {
		for i := range len(lines) {
			cut := strings.Join(lines[:i], "\n")
			if i > 0 {
				cut += "\n"
			}
			err := importStream(ctxT(t), strings.NewReader(cut), noWrites(t), importOptions{})
			require.ErrorIs(t, err, errTruncated, "cut after %d lines", i)
			require.ErrorIs(t, err, journal.ErrInvalid)
		}
	})
	t.Run("every byte boundary", func(t *testing.T) {
		// One conversation with every kind of line but a deadline
		// (metadata, a tool call row, a summary, three schedules), cut at
		// each byte.
		finished := exportOf(t, f, "finished")
		require.Equal(t, 3, strings.Count(finished, `{"type":"schedule"`))
		for i := range len(finished) {
			err := importStream(ctxT(t), strings.NewReader(finished[:i]), noWrites(t), importOptions{})
			require.ErrorIs(t, err, errTruncated, "cut after %d bytes", i)
			require.ErrorIs(t, err, journal.ErrInvalid)
		}
		require.NoError(t, importStream(ctxT(t), strings.NewReader(finished), func(bool) (journal.Store, error) { return memStore(t), nil }, importOptions{}))
	})
	t.Run("the command", func(t *testing.T) {
		// The case: an export cut after 5 lines.
		dir := filepath.Join(t.TempDir(), "target")
		r := cliRun(t, strings.Join(lines[:5], "\n")+"\n", "import", "--dir", dir)
		require.Equal(t, exitError, r.code)
		require.Contains(t, r.stderr, "input rejected, nothing imported: the input ends inside the section of conversation answered (line 2), before its end line: the input is cut short")
		require.Empty(t, r.stdout)
		require.NoDirExists(t, dir)
		// A dry run of a cut after the first section names nothing either.
		i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, `{"type":"end"`) })
		r = cliRun(t, strings.Join(lines[:i+1], "\n")+"\n", "import", "--dry-run", "--dir", dir)
		require.Equal(t, exitError, r.code)
		require.Contains(t, r.stderr, "nothing would be imported: the input ends after line")
		require.Empty(t, r.stdout, "no conversation is said to be importable from a refused input")
	})
}

// TestImportRefusesTamperedExports: an export with any one line removed or
// repeated (schedule lines included), or sections shuffled between files,
// is refused, and nothing is written: every line of a section is
// accounted for.
func TestImportRefusesTamperedExports(t *testing.T) {
	f := newFixture(t)
	all := exportOf(t, f, "answered", "finished", "waiting")
	lines := outLines(all)
	require.Equal(t, 3, strings.Count(all, `{"type":"schedule"`), "the fixture has schedules")
	join := func(ls []string) string { return strings.Join(ls, "\n") + "\n" }
	for i := range lines {
		without := join(slices.Delete(slices.Clone(lines), i, i+1))
		require.ErrorIs(t, importStream(ctxT(t), strings.NewReader(without), noWrites(t), importOptions{}), journal.ErrInvalid, "line %d removed: %s", i+1, lines[i])
		twice := join(slices.Insert(slices.Clone(lines), i, lines[i]))
		require.ErrorIs(t, importStream(ctxT(t), strings.NewReader(twice), noWrites(t), importOptions{}), journal.ErrInvalid, "line %d repeated: %s", i+1, lines[i])
	}

	waiting, finished := outLines(exportOf(t, f, "waiting")), outLines(exportOf(t, f, "finished"))
	for _, tc := range []struct{ name, input, want string }{
		{"a section moved into another file", join(append(slices.Clone(waiting[:len(waiting)-1]), finished[1:]...)),
			"the trailer counts 1 conversations in 15 lines, the file has 2 in 27"},
		{"a section without its end line", join(append(slices.Clone(waiting[:len(waiting)-2]), waiting[len(waiting)-1])),
			"trailer, but the section of conversation waiting before it has no end line"},
		{"two files, the first without its trailer", join(append(slices.Clone(waiting[:len(waiting)-1]), finished...)),
			"a header, but the file before it has no trailer"},
		{"a line after the trailer", join(append(slices.Clone(waiting), finished[1])), "after a trailer only a header may follow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := importStream(ctxT(t), strings.NewReader(tc.input), noWrites(t), importOptions{})
			require.ErrorIs(t, err, journal.ErrInvalid)
			require.ErrorContains(t, err, tc.want)
		})
	}
	t.Run("concatenated files are fine", func(t *testing.T) {
		st := memStore(t)
		require.NoError(t, importInto(ctxT(t), st, strings.NewReader(join(waiting)+join(finished)), importOptions{}))
		require.Len(t, collectAll(t, st), 3)
	})
}

// longStore writes a conversation "long" of n events (a user message of
// size bytes, and every tenth event a tool_call event with its row) into
// a Pebble store in dir, and returns the store.
func longStore(t testing.TB, dir string, n, size int) journal.Store {
	t.Helper()
	st, err := pebblejournal.Open(dir, pebblejournal.Options{CacheSize: 1 << 20, MemTableSize: 1 << 20, Logger: silent()})
	require.NoError(t, err)
	at := timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	text := strings.Repeat("x", size)
	for seq := 0; seq < n; {
		req := &messages.AppendRequest{ConversationId: "long", ExpectedLast: uint64(seq), Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE}
		for ; seq < n && len(req.Events) < 512; seq++ {
			if seq%10 == 9 {
				id := fmt.Sprintf("call-%06d", seq)
				call := &messages.ToolCall{Id: id, Name: "lookup", Arguments: `{}`}
				req.Events = append(req.Events, &messages.Event{Time: at, Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: call, Executor: messages.Executor_EXECUTOR_SERVER}}})
				req.ToolCalls = append(req.ToolCalls, &messages.ToolCallRecord{Id: id, ConversationId: "long", Name: "lookup",
					Executor: messages.Executor_EXECUTOR_SERVER, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, Created: at})
				continue
			}
			req.Events = append(req.Events, &messages.Event{Time: at, Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
				Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}}}}})
		}
		if seq == n {
			req.FsmState = &messages.FSMState{State: messages.AgentState_AGENT_STATE_IDLE, LastSeq: uint64(n)}
		}
		_, err := st.Append(context.Background(), req)
		require.NoError(t, err)
	}
	return st
}

// heapPeak samples the live heap (after a GC) and keeps the largest.
type heapPeak struct{ base, peak uint64 }

func newHeapPeak() *heapPeak {
	h := &heapPeak{}
	h.base = liveHeap()
	return h
}

func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func (h *heapPeak) sample() { h.peak = max(h.peak, liveHeap()) }

// above is the peak's excess over the heap before the run.
func (h *heapPeak) above() int64 { return int64(h.peak) - int64(h.base) }

// sampledWriter samples the heap every MiB written.
type sampledWriter struct {
	w    io.Writer
	h    *heapPeak
	n    int
	next int
}

func (s *sampledWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if s.n += n; s.n >= s.next {
		s.next = s.n + 1<<20
		s.h.sample()
	}
	return n, err
}

// discardStore is an import target that checks the append fence, keeps
// nothing else, and samples the heap at each append, while the importer
// still holds what it appends. Import's second pass calls no other
// methods than these.
type discardStore struct {
	journal.Store
	h       *heapPeak
	appends int
	last    map[string]uint64
}

func (s *discardStore) Append(_ context.Context, req *messages.AppendRequest) (journal.AppendResult, error) {
	if err := journal.ValidateAppend(req); err != nil {
		return journal.AppendResult{}, err
	}
	id := req.GetConversationId()
	if req.GetExpectedLast() != s.last[id] {
		return journal.AppendResult{}, journal.ErrConflict
	}
	s.last[id] += uint64(len(req.GetEvents()))
	s.appends++
	s.h.sample()
	return journal.AppendResult{FirstSeq: req.GetExpectedLast() + 1, LastSeq: s.last[id]}, nil
}

func (s *discardStore) PutSummary(context.Context, string, *messages.Summary) error { return nil }
func (s *discardStore) PutConversation(context.Context, journal.ConversationUpdate) error {
	return nil
}
func (s *discardStore) PutMetadata(context.Context, string, map[string]string) error { return nil }

// roundTripPeaks exports a conversation of n events to a file and imports
// it into a new store, and returns the live heap each held at its peak
// above the heap before it.
func roundTripPeaks(t *testing.T, n int) (export, imp int64) {
	dir := filepath.Join(t.TempDir(), "src")
	require.NoError(t, longStore(t, dir, n, 2000).Close())
	src, err := pebblejournal.Open(dir, pebblejournal.Options{CacheSize: 1 << 20, MemTableSize: 1 << 20, Logger: silent()})
	require.NoError(t, err)
	defer func() { require.NoError(t, src.Close()) }()
	file := filepath.Join(t.TempDir(), "long.jsonl")
	out, err := os.Create(file)
	require.NoError(t, err)
	h := newHeapPeak()
	// Pages of 128 events (256 KB), so both conversations take several:
	// the test measures what grows with the conversation, not the cap of
	// one page.
	require.NoError(t, exportPaged(ctxT(t), src, []string{"long"}, &sampledWriter{w: out, h: h}, nil, 128))
	h.sample()
	export = h.above()
	require.NoError(t, out.Close())

	in, err := os.Open(file)
	require.NoError(t, err)
	defer in.Close()
	h = newHeapPeak()
	// The target keeps nothing but the last seq, so the heap is the
	// importer's (a Pebble target's memtables are on the Go heap under
	// -race).
	dst := &discardStore{h: h, last: map[string]uint64{}}
	// Appends of at most 256 KiB of input, likewise.
	err = importStream(ctxT(t), in, func(create bool) (journal.Store, error) {
		if !create {
			return nil, errNoStore
		}
		return dst, nil
	}, importOptions{chunkBytes: 256 << 10})
	require.NoError(t, err)
	imp = h.above()
	require.Greater(t, dst.appends, 3, "written in several appends")
	require.Equal(t, uint64(n), dst.last["long"])
	return export, imp
}

// TestLongConversationStreams: export and import hold a bounded part of
// a conversation, not all of it: for a conversation of 4 MB of records
// (which a reader holding it whole would keep, about three times over as
// decoded messages and their JSON), each holds less than 2.5 MiB more
// than before it started, at its peak (the live heap after a GC, sampled
// every MiB written and at every append), with pages and appends of 256
// KB (the defaults are larger: 1024 events, 4 MiB).
func TestLongConversationStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 4 MB of records twice")
	}
	export, imp := roundTripPeaks(t, 2000)
	t.Logf("peak live heap above the start: export %d KiB, import %d KiB", export>>10, imp>>10)
	require.Less(t, export, int64(5<<19), "export holds the conversation")
	require.Less(t, imp, int64(5<<19), "import holds the conversation")
}

// countingStore counts the appends; it keeps schedules as its Store does.
type countingStore struct {
	journal.Store
	journal.ScheduleStore
	appends int
}

func (s *countingStore) Append(ctx context.Context, req *messages.AppendRequest) (journal.AppendResult, error) {
	s.appends++
	return s.Store.Append(ctx, req)
}

// TestImportInTinyBatches: an import in appends of one event (or of as few
// bytes as possible) writes exactly what one in large appends writes: the
// fence of each append is the seq the one before ended at, a tool call row
// goes with its event, and the conversation gets its status last.
func TestImportInTinyBatches(t *testing.T) {
	f := newFixture(t)
	all := exportOf(t, f, "answered", "finished", "waiting")
	want := withoutUpdated(dump(t, func() journal.Store {
		st := memStore(t)
		require.NoError(t, importInto(ctxT(t), st, strings.NewReader(all), importOptions{}))
		return st
	}()))
	total := 0
	for _, s := range parseExport(t, []byte(all)) {
		total += len(s.events)
	}
	for _, o := range []importOptions{{chunkEvents: 1}, {chunkBytes: 1}, {chunkEvents: 2, chunkBytes: 1 << 30}} {
		t.Run(fmt.Sprintf("events=%d,bytes=%d", o.chunkEvents, o.chunkBytes), func(t *testing.T) {
			inner := memStore(t)
			st := &countingStore{Store: inner, ScheduleStore: inner.(journal.ScheduleStore)}
			require.NoError(t, importInto(ctxT(t), st, strings.NewReader(all), o))
			require.Equal(t, want, withoutUpdated(dump(t, st)))
			if o.chunkEvents != 2 {
				require.Equal(t, total+3, st.appends, "one append per event and one per conversation")
			}
		})
	}
}

var updatedRE = regexp.MustCompile(`,"updated":"[^"]*"`)

// withoutUpdated drops the rows' "updated" (the time of the write) from
// an export.
func withoutUpdated(export string) string { return updatedRE.ReplaceAllString(export, "") }

// failAt fails the n-th write (counting from 1) with errDisk, and every
// write after it (a store that failed stays failed). With unknown, the
// n-th write lands and then fails with errDisk and
// journal.ErrUnknownOutcome, as a write whose commit's answer was lost.
type failAt struct {
	journal.Store
	n, writes int
	unknown   bool
}

var errDisk = errors.New("disk on fire")

// write counts one write and does it (do), unless it is one that fails.
func (s *failAt) write(do func() error) error {
	s.writes++
	switch {
	case s.n <= 0 || s.writes < s.n:
		return do()
	case s.writes == s.n && s.unknown:
		if err := do(); err != nil {
			return err
		}
		return fmt.Errorf("%w: %w", errDisk, journal.ErrUnknownOutcome)
	}
	return errDisk
}

func (s *failAt) Append(ctx context.Context, req *messages.AppendRequest) (res journal.AppendResult, err error) {
	err = s.write(func() (err error) {
		res, err = s.Store.Append(ctx, req)
		return err
	})
	return res, err
}

func (s *failAt) PutSummary(ctx context.Context, id string, sum *messages.Summary) error {
	return s.write(func() error { return s.Store.PutSummary(ctx, id, sum) })
}

func (s *failAt) PutConversation(ctx context.Context, u journal.ConversationUpdate) error {
	return s.write(func() error { return s.Store.PutConversation(ctx, u) })
}

func (s *failAt) Fork(ctx context.Context, req *messages.ForkRequest) error {
	return s.write(func() error { return s.Store.Fork(ctx, req) })
}

func (s *failAt) PutMetadata(ctx context.Context, id string, kv map[string]string) error {
	if len(kv) == 0 {
		return s.Store.PutMetadata(ctx, id, kv) // the first pass's tombstone probe
	}
	return s.write(func() error { return s.Store.PutMetadata(ctx, id, kv) })
}

// TestImportWriteFailures: whichever write fails, the error wraps the
// cause and says what was written; every conversation in the target is
// then either complete, exactly as exported, or named by the error as
// incomplete and left ENDED (which a runtime does not resume); and a
// failed write is never reported as bad input.
func TestImportWriteFailures(t *testing.T) {
	f := newFixture(t)
	// With schedules (of finished, and of a conversation without events,
	// whose first schedule creates its row).
	all := exportOf(t, f, "answered", "finished", "waiting") + scheduleOnly(t, exportOf(t, f, "finished"), "later", "later-")
	src := parseExport(t, []byte(all))
	ok := &failAt{Store: memStore(t)}
	require.NoError(t, importInto(ctxT(t), ok, strings.NewReader(all), importOptions{chunkEvents: 2}))
	require.Greater(t, ok.writes, 10)
	require.Len(t, collect(t, ok.Store, "later").schedules, 3)

	for n := 1; n <= ok.writes; n++ {
		st := &failAt{Store: memStore(t), n: n}
		err := importInto(ctxT(t), st, strings.NewReader(all), importOptions{chunkEvents: 2})
		require.ErrorIs(t, err, errDisk, "write %d", n)
		require.NotErrorIs(t, err, journal.ErrInvalid)
		if n == 1 {
			require.ErrorContains(t, err, "nothing imported")
		} else {
			require.ErrorContains(t, err, "import failed part-way")
		}
		got := collectAll(t, st.Store)
		delete(got, "existing")
		for id, s := range got {
			if strings.Contains(err.Error(), fmt.Sprintf("conversation %s is incomplete in the target, with status ENDED", id)) {
				require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_ENDED, s.row.GetStatus(), "write %d: %s", n, id)
				continue
			}
			require.Contains(t, err.Error(), id, "write %d: a complete conversation is named as imported", n)
			requireImported(t, src[id], s)
		}
	}
}

// TestImportWriteOfUnknownOutcome: whichever write lands but fails with
// journal.ErrUnknownOutcome (a networked Store that lost the answer to its
// commit), the error names every conversation the target holds: as
// imported, and then exactly as exported, or as one that may be there,
// and then ENDED or exactly as exported. (The first write of a
// conversation created it, ENDED, and the error said nothing of it.)
func TestImportWriteOfUnknownOutcome(t *testing.T) {
	f := newFixture(t)
	all := exportOf(t, f, "answered", "finished", "waiting") + scheduleOnly(t, exportOf(t, f, "finished"), "later", "later-")
	src := parseExport(t, []byte(all))
	ok := &failAt{Store: memStore(t)}
	require.NoError(t, importInto(ctxT(t), ok, strings.NewReader(all), importOptions{chunkEvents: 2}))

	for n := 1; n <= ok.writes; n++ {
		st := &failAt{Store: memStore(t), n: n, unknown: true}
		err := importInto(ctxT(t), st, strings.NewReader(all), importOptions{chunkEvents: 2})
		require.ErrorIs(t, err, journal.ErrUnknownOutcome, "write %d", n)
		require.NotErrorIs(t, err, journal.ErrInvalid)
		got := collectAll(t, st.Store)
		delete(got, "existing")
		require.NotEmpty(t, got, "write %d landed", n)
		for id, s := range got {
			if strings.Contains(err.Error(), fmt.Sprintf("conversation %s may be in the target (the outcome of a write of it is unknown)", id)) {
				if s.row.GetStatus() != messages.ConversationStatus_CONVERSATION_STATUS_ENDED {
					requireImported(t, src[id], s)
				}
				continue
			}
			require.Contains(t, err.Error(), id, "write %d: the error names every conversation in the target", n)
			requireImported(t, src[id], s)
		}
	}
}

// changingInput reads one text on the first pass and another after it
// was sought back to the start.
type changingInput struct {
	*strings.Reader
	second string
	seeks  int
}

func (c *changingInput) Seek(off int64, whence int) (int64, error) {
	if whence == io.SeekStart {
		if c.seeks++; c.seeks == 1 {
			c.Reader = strings.NewReader(c.second)
		}
	}
	return c.Reader.Seek(off, whence)
}

// TestImportNoticesAChangedInput: if the input differs on the second
// pass, import stops before the first write of bytes the first pass did
// not check, with an error wrapping errInputChanged; input it cannot seek
// (a pipe) is spooled, so it reads the same bytes twice.
func TestImportNoticesAChangedInput(t *testing.T) {
	f := newFixture(t)
	all := exportOf(t, f, "answered", "finished", "waiting")
	for _, tc := range []struct {
		name     string
		change   func(string) string
		imported int
	}{
		{"a byte of the first conversation", func(s string) string { return strings.Replace(s, "Refund 10.", "Refund 90.", 1) }, 0},
		{"a byte of the last conversation", func(s string) string { return strings.Replace(s, "Refund order 7", "Refund order 9", 1) }, 2},
		{"cut", func(s string) string { return s[:len(s)/2] }, strings.Count(all[:len(all)/2], `{"type":"end"`)},
		{"grown", func(s string) string {
			return s + strings.ReplaceAll(exportOf(t, f, "waiting"), "waiting", "waiting-2")
		}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := memStore(t)
			changed := tc.change(all)
			require.NotEqual(t, all, changed)
			in := &changingInput{Reader: strings.NewReader(all), second: changed}
			err := importInto(ctxT(t), st, in, importOptions{})
			require.ErrorIs(t, err, errInputChanged)
			got := collectAll(t, st)
			require.Len(t, got, tc.imported+1, "only conversations read the same twice were written")
		})
	}
	t.Run("a pipe is spooled", func(t *testing.T) {
		st := memStore(t)
		pipe := io.MultiReader(strings.NewReader(all)) // no Seek
		require.NoError(t, importInto(ctxT(t), st, pipe, importOptions{}))
		require.Len(t, collectAll(t, st), 4)
	})
}

// TestExportRefusesADamagedConversation: a conversation import would
// refuse (a tool_call event without its row, a pending row without its
// event, an fsm_state ahead of the log) makes export fail with an error
// wrapping journal.ErrCorrupt: --file is not written, and what stdout got
// has no end line, so import refuses it.
func TestExportRefusesADamagedConversation(t *testing.T) {
	at := timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	user := &messages.Event{Time: at, Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "hi"}}}}}}
	toolCall := func(id string) *messages.Event {
		return &messages.Event{Time: at, Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{
			Call: &messages.ToolCall{Id: id, Name: "approve", Arguments: `{}`}, Executor: messages.Executor_EXECUTOR_HUMAN}}}
	}
	row := func(conv, id string) *messages.ToolCallRecord {
		return &messages.ToolCallRecord{Id: id, ConversationId: conv, Name: "approve", Executor: messages.Executor_EXECUTOR_HUMAN,
			Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, Created: at}
	}
	for _, tc := range []struct {
		name   string
		damage func(st journal.Store) error
		want   string
	}{
		{"a tool_call event without its row", func(st journal.Store) error {
			// An Append refuses it; a fork copies it (a copied call's row is the source's).
			evs := []*messages.Event{proto.CloneOf(user), toolCall("tc-1")}
			evs[0].Seq, evs[1].Seq = 1, 2
			return st.Fork(ctxT(t), &messages.ForkRequest{ConversationId: "c", Events: evs, Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE})
		}, "tool_call event 2 names call tc-1, which has no row"},
		{"a pending row without its event", func(st journal.Store) error {
			if _, err := st.Append(ctxT(t), &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{user}}); err != nil {
				return err
			}
			return st.UpsertToolCall(ctxT(t), row("c", "tc-2"))
		}, "pending call tc-2 has no tool_call event"},
		{"an fsm_state ahead of the log", func(st journal.Store) error {
			_, err := st.Append(ctxT(t), &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{user},
				FsmState: &messages.FSMState{State: messages.AgentState_AGENT_STATE_IDLE, LastSeq: 5}})
			return err
		}, "its fsm_state says the log ends at seq 5, the log ends at 1"},
		{"a tool_result event answering a pending call", func(st journal.Store) error {
			result := &messages.Event{Time: at, Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{
				ToolCallId: "tc-3", Name: "approve", Outcome: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: `{}`}}}}}
			_, err := st.Append(ctxT(t), &messages.AppendRequest{ConversationId: "c", Events: []*messages.Event{user, toolCall("tc-3"), result},
				ToolCalls: []*messages.ToolCallRecord{row("c", "tc-3")}})
			return err
		}, "tool_result event 3 answers call tc-3, whose row is pending"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			st, err := pebblejournal.Open(dir, pebblejournal.Options{Logger: silent()})
			require.NoError(t, err)
			_, err = st.Append(ctxT(t), &messages.AppendRequest{ConversationId: "a-fine-one", Events: []*messages.Event{user}})
			require.NoError(t, err)
			require.NoError(t, tc.damage(st))
			var b bytes.Buffer
			err = exportTo(ctxT(t), st, []string{"a-fine-one", "c"}, &b, nil)
			require.ErrorIs(t, err, journal.ErrCorrupt)
			require.ErrorContains(t, err, "conversation c is damaged in the store ("+tc.want+")")
			require.NoError(t, st.Close())

			file := filepath.Join(t.TempDir(), "out.jsonl")
			r := cliRun(t, "", "export", "--all", "--dir", dir, "--file", file)
			require.Equal(t, exitError, r.code)
			require.Contains(t, r.stderr, tc.want)
			require.NoFileExists(t, file)

			r = cliRun(t, "", "export", "--all", "--dir", dir)
			require.Equal(t, exitError, r.code)
			// stdout may have got part of the export (what was buffered is
			// not flushed); import refuses whatever it got.
			err = importStream(ctxT(t), strings.NewReader(r.stdout), noWrites(t), importOptions{})
			require.ErrorIs(t, err, errTruncated, "and import refuses that part")
		})
	}
}

// fakeTerminal is a stderr the CLI is told is a terminal.
type fakeTerminal struct{ bytes.Buffer }

// TestProgressOnlyOnATerminal: a long export or import reports progress on
// stderr when stderr is a terminal, and never otherwise (a file, a pipe);
// stdout is the same either way.
func TestProgressOnlyOnATerminal(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "src")
	require.NoError(t, longStore(t, dir, 300, 10).Close())
	runCLI := func(terminal bool, stdin string, args ...string) result {
		var out bytes.Buffer
		errw := &fakeTerminal{}
		c := newCLI(strings.NewReader(stdin), &out, errw)
		c.isTerminal = func(w io.Writer) bool { return terminal && w == io.Writer(errw) }
		now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		c.now = func() time.Time { now = now.Add(time.Second); return now }
		code := c.run(ctxT(t), args)
		return result{out.String(), errw.String(), code}
	}
	plain := runCLI(false, "", "export", "long", "--dir", dir)
	requireOK(t, plain)
	tty := runCLI(true, "", "export", "long", "--dir", dir)
	require.Equal(t, exitOK, tty.code)
	require.Equal(t, plain.stdout, tty.stdout)
	require.Regexp(t, `^(\rexport: \d+ lines, \d+\.\d MiB, \d+s )+\n$`, tty.stderr)

	imported := runCLI(false, plain.stdout, "import", "--dir", filepath.Join(t.TempDir(), "a"))
	requireOK(t, imported)
	ttyImported := runCLI(true, plain.stdout, "import", "--dir", filepath.Join(t.TempDir(), "b"))
	require.Equal(t, exitOK, ttyImported.code)
	require.Equal(t, imported.stdout, ttyImported.stdout)
	require.Regexp(t, `^(\rimport: checking: \d+ lines, [^\r]+)+\n(\rimport: writing: \d+ lines, [^\r]+)+\n$`, ttyImported.stderr)

	// The real test: files and buffers are not terminals.
	require.False(t, isTerminal(&bytes.Buffer{}))
	file, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	require.NoError(t, err)
	defer file.Close()
	require.False(t, isTerminal(file))
}

func silent() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestExportOfAConversationMidTurn: the runtime leaves the row's fsm_state
// cache behind the log in the middle of a turn (a model answer with a
// server call, written after the user's message, does not rewrite it), so
// a store whose process stopped there has a cache behind its log. Export
// takes it as it is, and import writes it back; both refused it as
// damaged.
func TestExportOfAConversationMidTurn(t *testing.T) {
	at := timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	src := memStore(t)
	_, err := src.Append(ctxT(t), &messages.AppendRequest{ConversationId: "c",
		Events: []*messages.Event{{Time: at, Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
			Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "look it up"}}}}}}},
		Status:   messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE,
		FsmState: &messages.FSMState{State: messages.AgentState_AGENT_STATE_IDLE, LastSeq: 1}})
	require.NoError(t, err)
	call := &messages.ToolCall{Id: "tc-1", Name: "lookup", Arguments: `{}`}
	_, err = src.Append(ctxT(t), &messages.AppendRequest{ConversationId: "c", ExpectedLast: 1,
		Events: []*messages.Event{
			{Time: at, Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{call}}}},
			{Time: at, Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: call, Executor: messages.Executor_EXECUTOR_SERVER}}}},
		ToolCalls: []*messages.ToolCallRecord{{Id: "tc-1", ConversationId: "c", Name: "lookup", Args: `{}`,
			Executor: messages.Executor_EXECUTOR_SERVER, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, Created: at}}})
	require.NoError(t, err)

	var out bytes.Buffer
	require.NoError(t, exportTo(ctxT(t), src, []string{"c"}, &out, nil))
	dst := memStore(t)
	require.NoError(t, importStream(ctxT(t), strings.NewReader(out.String()), func(bool) (journal.Store, error) { return dst, nil }, importOptions{}))
	row, err := dst.Conversation(ctxT(t), "c")
	require.NoError(t, err)
	require.Equal(t, uint64(1), row.GetFsmState().GetLastSeq(), "the cache as it was")
	last, err := dst.LastSeq(ctxT(t), "c")
	require.NoError(t, err)
	require.Equal(t, uint64(3), last)
	pending, err := dst.PendingToolCalls(ctxT(t), "c")
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Equal(t, "tc-1", pending[0].GetId())
	var again bytes.Buffer
	require.NoError(t, exportTo(ctxT(t), dst, []string{"c"}, &again, nil))
	require.Equal(t, withoutUpdated(out.String()), withoutUpdated(again.String()), "the import exports as the source did")
}

// TestImportRefusesABadFork: a fork's section that breaks the format's
// rules is refused with ErrInvalid, and nothing is written: a fork origin
// in an export of a version that carries no fork (it was taken and the
// origin dropped), a row after a copied tool_call event (the row is the
// source's), a fork whose base summary line is missing or covers its
// origin, an origin past the log, and a summary before the events of a
// conversation that is no fork.
func TestImportRefusesABadFork(t *testing.T) {
	f := newFixture(t)
	forkFinished(t, f)
	forkWhole(t, f)
	good := exportOf(t, f, "forked", "whole")
	var callRow string
	for _, l := range outLines(exportOf(t, f, "finished")) {
		if strings.HasPrefix(l, `{"type":"tool_call"`) {
			callRow = strings.ReplaceAll(l, `"finished"`, `"whole"`)
			break
		}
	}
	require.NotEmpty(t, callRow)
	var lines []string
	withRow := false
	for _, l := range outLines(good) {
		lines = append(lines, l)
		if !withRow && strings.HasPrefix(l, `{"type":"event","conversation":"whole"`) && strings.Contains(l, `"tool_call":{`) {
			lines = append(lines, callRow)
			withRow = true
		}
	}
	require.True(t, withRow, "whole copied a tool_call event")
	originRE := regexp.MustCompile(`("forked_from":\{"conversation_id":"finished","seq":)"\d+"`)
	forkedOnly := exportOf(t, f, "forked")
	var noBase []string
	for _, l := range outLines(forkedOnly) {
		if !strings.HasPrefix(l, `{"type":"summary"`) {
			noBase = append(noBase, l)
		}
	}
	for _, tc := range []struct{ name, in, msg string }{
		{"version 3", strings.Replace(good, `"version":5`, `"version":3`, 1), "in an export of version 3, which carries no fork"},
		{"version 2", strings.Replace(strings.ReplaceAll(good, `"schedules":0,`, ""), `"version":5`, `"version":2`, 1), "in an export of version 2, which carries no fork"},
		{"row of a copied call", strings.Join(lines, "\n") + "\n", "does not follow its tool_call event"},
		{"no base summary", strings.Join(noBase, "\n") + "\n", "event of seq 5, want 1 (a fork's events run from 1, or from just after the summary it copied, whose line comes before them)"},
		{"origin past the log", originRE.ReplaceAllString(forkedOnly, `$1"999"`), "its log ends at seq"},
		{"origin within the summary", originRE.ReplaceAllString(forkedOnly, `$1"2"`), "not an earlier one"},
		{"summary before the events of no fork", regexp.MustCompile(`,"forked_from":\{[^}]*\}`).ReplaceAllString(forkedOnly, ""), "summary of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NotEqual(t, good, tc.in)
			err := importStream(ctxT(t), strings.NewReader(tc.in), noWrites(t), importOptions{})
			require.ErrorIs(t, err, journal.ErrInvalid)
			require.ErrorContains(t, err, tc.msg)
			st := memStore(t)
			before := dump(t, st)
			require.ErrorIs(t, importInto(ctxT(t), st, strings.NewReader(tc.in), importOptions{}), journal.ErrInvalid)
			require.Equal(t, before, dump(t, st), "nothing written")
		})
	}
	st := memStore(t)
	require.NoError(t, importInto(ctxT(t), st, strings.NewReader(good), importOptions{}), "the export as written imports")
}

// TestImportWriteFailuresOfAFork: whichever write of a fork's import
// fails, the fork is either complete (its exported status, its origin) or
// named as incomplete and ENDED, which a runtime does not resume; its
// first write (Store.Fork) makes it ENDED.
func TestImportWriteFailuresOfAFork(t *testing.T) {
	f := newFixture(t)
	forkFinished(t, f)
	forkWhole(t, f)
	in := exportOf(t, f, "forked", "whole")
	ok := &failAt{Store: memStore(t)}
	require.NoError(t, importInto(ctxT(t), ok, strings.NewReader(in), importOptions{chunkEvents: 2}))
	require.Equal(t, withoutUpdated(in), withoutUpdated(exportOfStore(t, ok.Store, "forked", "whole")))
	var paged strings.Builder
	require.NoError(t, exportPaged(ctxT(t), ok.Store, []string{"forked", "whole"}, &paged, nil, 1))
	require.Equal(t, exportOfStore(t, ok.Store, "forked", "whole"), paged.String(), "an export reading one event at a time")
	for n := 1; n <= ok.writes; n++ {
		st := &failAt{Store: memStore(t), n: n}
		err := importInto(ctxT(t), st, strings.NewReader(in), importOptions{chunkEvents: 2})
		require.ErrorIs(t, err, errDisk, "write %d", n)
		require.NotErrorIs(t, err, journal.ErrInvalid)
		for _, id := range []string{"forked", "whole"} {
			row, rerr := st.Store.Conversation(ctxT(t), id)
			if errors.Is(rerr, journal.ErrNotFound) {
				continue
			}
			require.NoError(t, rerr)
			require.Equal(t, "finished", row.GetForkedFrom().GetConversationId(), "write %d: %s", n, id)
			if strings.Contains(err.Error(), fmt.Sprintf("conversation %s is incomplete in the target, with status ENDED", id)) {
				require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_ENDED, row.GetStatus(), "write %d: %s", n, id)
				continue
			}
			require.Equal(t, messages.ConversationStatus_CONVERSATION_STATUS_IDLE, row.GetStatus(), "write %d: %s", n, id)
		}
	}
}

// exportOfStore is the export of the conversations ids of st.
func exportOfStore(t *testing.T, st journal.Store, ids ...string) string {
	t.Helper()
	var b strings.Builder
	require.NoError(t, exportTo(ctxT(t), st, ids, &b, nil))
	return b.String()
}

// TestImportRefusesAResultOfAPendingCall: a tool call row that is pending
// while a tool_result event of the log answers its call is refused with
// ErrInvalid, and nothing is written: the row of a call is resolved in the
// write of its result, and the import left a call listed as pending, for
// ever, that its conversation had answered.
func TestImportRefusesAResultOfAPendingCall(t *testing.T) {
	f := newFixture(t)
	finished := exportOf(t, f, "finished")
	lines := outLines(finished)
	edited := 0
	for i, l := range lines {
		if !strings.Contains(l, `"type":"tool_call"`) {
			continue
		}
		var env map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &env))
		rec := env["record"].(map[string]any)
		require.Equal(t, "TOOL_CALL_STATUS_RESOLVED", rec["status"])
		rec["status"] = "TOOL_CALL_STATUS_PENDING"
		delete(rec, "result")
		delete(rec, "resolved")
		b, err := json.Marshal(env)
		require.NoError(t, err)
		lines[i] = string(b)
		edited++
	}
	require.Positive(t, edited, "the fixture's conversation has an answered call")
	in := strings.Join(lines, "\n") + "\n"
	err := importStream(ctxT(t), strings.NewReader(in), noWrites(t), importOptions{})
	require.ErrorIs(t, err, journal.ErrInvalid)
	require.ErrorContains(t, err, "whose row is pending")
	st := memStore(t)
	before := dump(t, st)
	require.ErrorIs(t, importInto(ctxT(t), st, strings.NewReader(in), importOptions{}), journal.ErrInvalid)
	require.Equal(t, before, dump(t, st), "nothing written")
	require.NoError(t, importInto(ctxT(t), st, strings.NewReader(finished), importOptions{}), "the export as written imports")
}

// eventOfSize returns a user event whose encoding, Seq unset, is n bytes.
func eventOfSize(n int) *messages.Event {
	at := timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	ev := func(pad int) *messages.Event {
		return &messages.Event{Time: at, Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
			Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: strings.Repeat("x", pad)}}}}}}
	}
	pad := n - proto.Size(ev(0))
	for {
		e := ev(pad)
		d := n - proto.Size(e)
		if d == 0 {
			return e
		}
		pad += d
	}
}

// TestImportEventAtTheLimit: an export round-trips every log a Store
// holds, an event Append took at exactly journal.MaxEventBytes included,
// in a conversation's own appends and in the copied events of a fork
// (Store.Fork): an event is measured as the Append that logged it measured
// it, its seq (which the store set) not counting. The import measured each
// event with its seq, two bytes over, and refused the export. One byte
// more is refused with ErrInvalid, wherever the event is, and nothing is
// written.
func TestImportEventAtTheLimit(t *testing.T) {
	// Megabyte events through a Store of 1 MiB memtables, under -race on a
	// busy machine: the test once took wait whole (20 s) before its first
	// import. The bound only stops a hang; nothing here is timed.
	ctx, cancel := context.WithTimeout(context.Background(), 6*wait)
	defer cancel()
	src := memStore(t)
	big := func() *messages.Event { return eventOfSize(journal.MaxEventBytes) }
	small := eventOfSize(100)
	_, err := src.Append(ctx, &messages.AppendRequest{ConversationId: "limit", Events: []*messages.Event{big(), small},
		Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE})
	require.NoError(t, err)
	evs, err := src.Events(ctx, "limit", journal.EventQuery{})
	require.NoError(t, err)
	require.NoError(t, src.Fork(ctx, &messages.ForkRequest{ConversationId: "forked", Events: evs,
		Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE,
		Origin: &messages.ForkOrigin{ConversationId: "limit", Seq: 2}}))
	_, err = src.Append(ctx, &messages.AppendRequest{ConversationId: "forked", ExpectedLast: 2, Events: []*messages.Event{big()},
		Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE})
	require.NoError(t, err)
	in := exportOfStore(t, src, "limit", "forked")

	st := memStore(t)
	require.NoError(t, importInto(ctx, st, strings.NewReader(in), importOptions{}))
	require.Equal(t, withoutUpdated(in), withoutUpdated(exportOfStore(t, st, "limit", "forked")))

	pad := strings.Repeat("x", len(big().GetUserMsg().GetContent()[0].GetText()))
	lines := outLines(in)
	for _, tc := range []struct {
		name, conv string
		seq        int
	}{
		{"append", "limit", 1},
		{"fork's copied event", "forked", 1},
		{"fork's own append", "forked", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			over := slices.Clone(lines)
			n := 0
			for i, l := range over {
				if strings.HasPrefix(l, fmt.Sprintf(`{"type":"event","conversation":%q`, tc.conv)) && strings.Contains(l, fmt.Sprintf(`"seq":"%d"`, tc.seq)) {
					require.Contains(t, l, pad)
					over[i] = strings.Replace(l, pad, pad+"x", 1)
					n++
				}
			}
			require.Equal(t, 1, n)
			bad := strings.Join(over, "\n") + "\n"
			err := importStream(ctx, strings.NewReader(bad), noWrites(t), importOptions{})
			require.ErrorIs(t, err, journal.ErrInvalid)
			require.ErrorContains(t, err, fmt.Sprintf("event of %d bytes exceeds %d", journal.MaxEventBytes+1, journal.MaxEventBytes))
			st := memStore(t)
			before := dump(t, st)
			require.ErrorIs(t, importInto(ctx, st, strings.NewReader(bad), importOptions{}), journal.ErrInvalid)
			require.Equal(t, before, dump(t, st), "nothing written")
		})
	}
}

// TestImportKeepsTheCreatedTime: an imported row has the created time of
// the exported one, which the write that created it set otherwise: a
// conversation configured before its first message was created before
// that message (import gave it the message's time), and one without
// events got the time of the import. (Forks: TestExportOfAFork.)
func TestImportKeepsTheCreatedTime(t *testing.T) {
	ctx := ctxT(t)
	src := memStore(t)
	configured := timestamppb.New(time.Date(2025, 12, 1, 8, 0, 0, 0, time.UTC))
	require.NoError(t, src.PutConversation(ctx, journal.ConversationUpdate{ID: "configured", Settings: map[string]string{"model": "m1"}, Created: configured}))
	_, err := src.Append(ctx, &messages.AppendRequest{ConversationId: "configured",
		Events: []*messages.Event{{Time: timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
			Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "hello"}}}}}}}})
	require.NoError(t, err)
	empty := timestamppb.New(time.Date(2025, 11, 1, 8, 0, 0, 0, time.UTC))
	require.NoError(t, src.PutConversation(ctx, journal.ConversationUpdate{ID: "empty", Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE, Created: empty}))

	in := exportOfStore(t, src, "configured", "empty")
	dst := memStore(t)
	var noted []string
	require.NoError(t, importInto(ctx, dst, strings.NewReader(in), importOptions{onNoCreated: func(id string) { noted = append(noted, id) }}))
	for id, want := range map[string]*timestamppb.Timestamp{"configured": configured, "empty": empty} {
		row, err := dst.Conversation(ctx, id)
		require.NoError(t, err)
		require.True(t, proto.Equal(want, row.GetCreated()), "%s: created %v, want %v", id, row.GetCreated().AsTime(), want.AsTime())
	}
	require.Empty(t, noted, "every exported row has its created time")
	require.Equal(t, withoutUpdated(in), withoutUpdated(exportOfStore(t, dst, "configured", "empty")))

	// A created time that is no valid timestamp is refused, nothing written.
	bad := strings.Replace(in, `"created":"2025-11-01T08:00:00Z"`, `"created":"10000-01-01T00:00:00Z"`, 1)
	require.NotEqual(t, in, bad)
	require.ErrorIs(t, importStream(ctx, strings.NewReader(bad), noWrites(t), importOptions{}), journal.ErrInvalid)
}

// maxAppendStore records the largest append written.
type maxAppendStore struct {
	journal.Store
	journal.ScheduleStore
	largest int
}

func (s *maxAppendStore) Append(ctx context.Context, req *messages.AppendRequest) (journal.AppendResult, error) {
	s.largest = max(s.largest, proto.Size(req))
	return s.Store.Append(ctx, req)
}

// TestImportCountsToolCallRowsInTheChunkBytes: the rows of a conversation's
// tool calls count against an append's bytes as its events do, so an
// import's append stays within its chunk's bytes (and the default ones
// well within journal.MaxAppendBytes). Rows went uncounted: small
// tool_call events with large rows (up to journal.MaxRecordBytes each)
// made one append of them all, up to importChunkEvents.
func TestImportCountsToolCallRowsInTheChunkBytes(t *testing.T) {
	const calls, chunk = 10, 16 << 10
	ctx := ctxT(t)
	src := memStore(t)
	at := timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	for i := range calls {
		id := fmt.Sprintf("call_%d", i)
		_, err := src.Append(ctx, &messages.AppendRequest{ConversationId: "rows", ExpectedLast: uint64(i),
			Events: []*messages.Event{{Time: at, Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{
				Executor: messages.Executor_EXECUTOR_SERVER, Call: &messages.ToolCall{Id: id, Name: "lookup", Arguments: "{}"}}}}},
			ToolCalls: []*messages.ToolCallRecord{{Id: id, ConversationId: "rows", Name: "lookup", Args: "{}",
				Executor: messages.Executor_EXECUTOR_SERVER, Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, Created: at, Resolved: at,
				Result: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: strings.Repeat("r", 8<<10)}}}},
			Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE})
		require.NoError(t, err)
	}
	in := exportOfStore(t, src, "rows")

	inner := memStore(t)
	st := &maxAppendStore{Store: inner, ScheduleStore: inner.(journal.ScheduleStore)}
	require.NoError(t, importInto(ctx, st, strings.NewReader(in), importOptions{chunkBytes: chunk}))
	require.Equal(t, withoutUpdated(in), withoutUpdated(exportOfStore(t, st, "rows")))
	require.LessOrEqual(t, st.largest, 2*chunk, "an append within its chunk's bytes and one row more")
}

// TestImportRefusesASummaryThatCutsACall: a summary that ends inside a
// tool call (its call issued at or before its end, its result after it or
// none yet) is refused with ErrInvalid naming its span and the call, and
// nothing is written: the runtime never writes one, and a conversation
// revived from it would lose the call or show the model its result
// without it. A summary ending where every call has its result imports.
func TestImportRefusesASummaryThatCutsACall(t *testing.T) {
	f := newFixture(t)
	export := exportOf(t, f, "waiting", "finished")
	require.Contains(t, export, `"to_seq":"4"`, "finished's summary covers 1..4")
	// waiting: lookup issued at 2, answered at 4; approve issued at 5,
	// pending (its tool_call event at 6, the suspension at 7).
	withSummary := func(to string) string {
		line := `{"type":"summary","conversation":"waiting","record":{"from_seq":"1","to_seq":"` + to + `","content":"the user asked for a refund"}}`
		in := strings.Replace(export, `{"type":"deadline","conversation":"waiting"`, line+"\n"+`{"type":"deadline","conversation":"waiting"`, 1)
		in = strings.Replace(in, `"summaries":0,"deadlines":1`, `"summaries":1,"deadlines":1`, 1)
		return regexp.MustCompile(`"lines":(\d+)`).ReplaceAllStringFunc(in, func(m string) string {
			n, err := strconv.Atoi(strings.TrimPrefix(m, `"lines":`))
			require.NoError(t, err)
			return fmt.Sprintf(`"lines":%d`, n+1)
		})
	}
	for _, tc := range []struct{ name, in, want string }{
		{"before a result", strings.Replace(export, `"to_seq":"4"`, `"to_seq":"3"`, 1), "summary of seq 1..3 ends inside tool call call_"},
		{"at the assistant message issuing a call", strings.Replace(export, `"to_seq":"4"`, `"to_seq":"2"`, 1), "issued at seq 2 and not answered by seq 2"},
		{"over a pending call", withSummary("7"), "summary of seq 1..7 ends inside tool call " + f.waitingCall + ", issued at seq 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := importStream(ctxT(t), strings.NewReader(tc.in), noWrites(t), importOptions{})
			require.ErrorIs(t, err, journal.ErrInvalid)
			require.ErrorContains(t, err, tc.want)
			st := memStore(t)
			before := dump(t, st)
			require.ErrorIs(t, importInto(ctxT(t), st, strings.NewReader(tc.in), importOptions{}), journal.ErrInvalid)
			require.Equal(t, before, dump(t, st), "nothing written")
		})
	}
	st := memStore(t)
	require.NoError(t, importInto(ctxT(t), st, strings.NewReader(withSummary("4")), importOptions{}), "a summary where no call is open imports")
	sum, err := st.LatestSummary(ctxT(t), "waiting")
	require.NoError(t, err)
	require.Equal(t, uint64(4), sum.GetToSeq())

	// Export leaves out a summary that cuts a call, one put by hand (a
	// Store takes it), so that its output imports.
	require.NoError(t, st.PutSummary(ctxT(t), "waiting", &messages.Summary{FromSeq: 1, ToSeq: 6, Content: "put by hand"}))
	out := exportOfStore(t, st, "waiting")
	require.NotContains(t, out, "put by hand")
	require.Contains(t, out, `"to_seq":"4"`, "the summary where no call is open is exported")
	require.NoError(t, importInto(ctxT(t), memStore(t), strings.NewReader(out), importOptions{}))
}

// forkCopiesCuttingACall writes to st a conversation "src" whose call
// tc-cut is issued at seq 2 (its tool_call event at 3, its row pending)
// and two forks of it at seq 3: "cut", whose copied summary ends at seq 2,
// inside the call (its log, after it, holds the call's tool_call event
// and not the assistant_msg issuing it), and "sound", whose copied
// summary ends at seq 1, before the call.
func forkCopiesCuttingACall(t *testing.T, st journal.Store) {
	t.Helper()
	ctx := ctxT(t)
	call := &messages.ToolCall{Id: "tc-cut", Name: "approve", Arguments: `{}`}
	_, err := st.Append(ctx, &messages.AppendRequest{ConversationId: "src", Events: []*messages.Event{
		{Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: "refund"}}}}}},
		{Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{ToolCalls: []*messages.ToolCall{call}}}},
		{Body: &messages.Event_ToolCall{ToolCall: &messages.ToolCallEvent{Call: call, Executor: messages.Executor_EXECUTOR_HUMAN}}},
	}, ToolCalls: []*messages.ToolCallRecord{{Id: call.GetId(), ConversationId: "src", Name: "approve", Executor: messages.Executor_EXECUTOR_HUMAN,
		Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING}}})
	require.NoError(t, err)
	fork := func(dst string, to uint64) {
		sum := &messages.Summary{FromSeq: 1, ToSeq: to, Content: "copied"}
		evs, err := st.Events(ctx, "src", journal.EventQuery{After: to})
		require.NoError(t, err)
		require.NoError(t, st.(journal.Forks).Fork(ctx, &messages.ForkRequest{ConversationId: dst, Summary: sum, Events: evs,
			Status: messages.ConversationStatus_CONVERSATION_STATUS_IDLE, Origin: &messages.ForkOrigin{ConversationId: "src", Seq: 3}}))
	}
	fork("cut", 2) // after the assistant_msg issuing tc-cut, before its tool_call event
	fork("sound", 1)
}

// TestImportRefusesAForkCopyThatCutsACall: the summary a fork copied (its
// log starts after it) is checked as a revival checks it, there being no
// log before it in the fork: a tool_call event after it whose call no
// assistant_msg after it issued is refused with ErrInvalid, nothing
// written. Import checked every summary line but that one, so such a fork
// imported, and its revival passed the summary over and found no history.
// A fork whose copied summary ends before the call imports. (Export
// refuses to write such a fork, TestExportRefusesAForkCopyThatCutsACall:
// the input is the sound fork's export with its copied summary moved past
// the assistant_msg, as an older export wrote it.)
func TestImportRefusesAForkCopyThatCutsACall(t *testing.T) {
	ctx := ctxT(t)
	src := memStore(t)
	forkCopiesCuttingACall(t, src)

	sound := exportOfStore(t, src, "sound")
	var cut []string
	for _, l := range outLines(sound) {
		switch {
		case strings.Contains(l, `"type":"event"`) && strings.Contains(l, `"seq":"2"`):
			continue
		case strings.Contains(l, `"type":"summary"`):
			l = strings.Replace(l, `"to_seq":"1"`, `"to_seq":"2"`, 1)
		case strings.Contains(l, `"type":"trailer"`):
			l = strings.Replace(l, `"lines":6`, `"lines":5`, 1)
		}
		cut = append(cut, strings.ReplaceAll(l, `"sound"`, `"cut"`))
	}
	in := strings.Join(cut, "\n") + "\n"
	require.Contains(t, in, `"to_seq":"2"`)
	require.Contains(t, in, `"lines":5`)
	err := importStream(ctx, strings.NewReader(in), noWrites(t), importOptions{})
	require.ErrorIs(t, err, journal.ErrInvalid)
	require.ErrorContains(t, err, "the summary of seq 1..2 that fork cut copied ends inside a tool call")
	st := memStore(t)
	before := dump(t, st)
	require.ErrorIs(t, importInto(ctx, st, strings.NewReader(in), importOptions{}), journal.ErrInvalid)
	require.Equal(t, before, dump(t, st), "nothing written")

	require.NoError(t, importInto(ctx, st, strings.NewReader(sound), importOptions{}), "a copied summary where no call is open imports")
	sum, err := st.LatestSummary(ctx, "sound")
	require.NoError(t, err)
	require.Equal(t, uint64(1), sum.GetToSeq())
}

// TestExportRefusesAForkCopyThatCutsACall: a fork whose copied summary
// ends inside a tool call, as a revival decides it, is damage to export,
// as lazarus check reports it: the summary cannot be left out (the fork's
// log starts after it), and import refuses it. Export wrote it, and its
// output could never be imported. The error wraps journal.ErrCorrupt and
// names the conversation; the command exits 1 and leaves no --file; a
// sound fork exports and imports.
func TestExportRefusesAForkCopyThatCutsACall(t *testing.T) {
	dir := t.TempDir()
	st, err := pebblejournal.Open(dir, pebblejournal.Options{Logger: silent()})
	require.NoError(t, err)
	forkCopiesCuttingACall(t, st)
	const want = "conversation cut is damaged in the store (the summary up to seq 2 that it copied as a fork, which its log starts after, ends inside a tool call"
	err = exportTo(ctxT(t), st, []string{"sound", "cut"}, io.Discard, nil)
	require.ErrorIs(t, err, journal.ErrCorrupt)
	require.ErrorContains(t, err, want)
	sound := exportOfStore(t, st, "sound")
	require.NoError(t, st.Close())

	file := filepath.Join(t.TempDir(), "out.jsonl")
	r := cliRun(t, "", "export", "--dir", dir, "--file", file, "cut")
	require.Equal(t, exitError, r.code, r.stderr)
	require.Contains(t, r.stderr, want)
	require.NoFileExists(t, file)
	r = cliRun(t, "", "check", "--dir", dir)
	require.Equal(t, exitDamaged, r.code, "lazarus check reports the same damage")
	require.Contains(t, r.stdout+r.stderr, `the summary of seq 1..2 it starts from (a fork's copy) ends inside a tool call`)

	require.NoError(t, importInto(ctxT(t), memStore(t), strings.NewReader(sound), importOptions{}))
}
