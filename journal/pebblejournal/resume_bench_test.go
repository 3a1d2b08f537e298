package pebblejournal

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// ResumeIdleEnv sets the number of idle conversations that
// BenchmarkResumeListing fills its store with (default 1,000,000).
const ResumeIdleEnv = "LAZARUS_BENCH_RESUME_IDLE"

// resumeActive is the number of ACTIVE conversations among them: what a
// restart finds mid-turn.
const resumeActive = 16

// fillForResume writes idle conversations (one user message, an idle
// fsm_state, status IDLE: a finished turn) and active ones (one user
// message the model owes a turn) in synced batches of 10,000 requests, and
// returns the active ids in order. The active ids are spread over the id
// space, so a scan meets them everywhere.
func fillForResume(tb testing.TB, s *Store, idle, active int) []string {
	tb.Helper()
	at := timestamppb.New(time.Unix(1_700_000_000, 0))
	var ids []string
	every := max(idle/max(active, 1), 1)
	reqs := make([]*messages.AppendRequest, 0, 10_000)
	flush := func() {
		for i, res := range s.AppendBatch(ctx, reqs) {
			require.NoError(tb, res.Err, "fill %q", reqs[i].GetConversationId())
		}
		reqs = reqs[:0]
	}
	for i := range idle {
		id := fmt.Sprintf("conv-%08d", i)
		ev := userEvent("hello")
		ev.Time = at
		req := &messages.AppendRequest{ConversationId: id, Events: []*messages.Event{ev},
			FsmState: &messages.FSMState{State: messages.AgentState_AGENT_STATE_IDLE, LastSeq: 1},
			Status:   messages.ConversationStatus_CONVERSATION_STATUS_IDLE}
		if i%every == every/2 && len(ids) < active {
			id += "-active"
			req.ConversationId, req.FsmState, req.Status = id, nil, messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE
			ids = append(ids, id)
		}
		reqs = append(reqs, req)
		if len(reqs) == cap(reqs) {
			flush()
		}
	}
	for len(ids) < active {
		id := fmt.Sprintf("zz-active-%04d", len(ids))
		reqs = append(reqs, &messages.AppendRequest{ConversationId: id, Events: []*messages.Event{userEvent("hello")}})
		ids = append(ids, id)
	}
	flush()
	return ids
}

// resumeByIndex is what Runtime.resumeInterrupted does since the index:
// page through ListActiveConversations.
func resumeByIndex(tb testing.TB, s *Store) []string {
	var out []string
	cursor := ""
	for {
		ids, next, err := s.ListActiveConversations(ctx, cursor, 500)
		require.NoError(tb, err)
		out = append(out, ids...)
		if next == "" {
			return out
		}
		cursor = next
	}
}

// resumeByFullListing is what it did before: list every conversation and
// keep the ACTIVE ones.
func resumeByFullListing(tb testing.TB, s *Store) []string {
	var out []string
	cursor := ""
	for {
		rows, next, err := s.ListConversations(ctx, cursor, 500)
		require.NoError(tb, err)
		for _, r := range rows {
			if r.GetStatus() == messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE {
				out = append(out, r.GetId())
			}
		}
		if next == "" {
			return out
		}
		cursor = next
	}
}

// TestResumeListingsAgree: on a small store, the index lists exactly the
// ACTIVE conversations that the full listing finds, in the same order, and
// so does the index that Open builds for a store written before it.
func TestResumeListingsAgree(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	require.NoError(t, err)
	want := fillForResume(t, s, 5_000, 7)
	require.Equal(t, want, resumeByFullListing(t, s))
	require.Equal(t, want, resumeByIndex(t, s))

	require.NoError(t, s.db.DeleteRange([]byte{famActive}, familyEnd(famActive), nil))
	require.NoError(t, s.putRawForTesting(layoutKey, []byte(layoutV2)))
	require.NoError(t, s.Close())
	s, err = Open(dir, Options{})
	require.NoError(t, err)
	defer s.Close()
	require.Equal(t, want, resumeByIndex(t, s), "the index built by the upgrade")
}

// BenchmarkResumeListing measures what a restart pays to find the
// conversations to resume, on a store of LAZARUS_BENCH_RESUME_IDLE idle
// conversations (default 1,000,000) and 16 ACTIVE ones: "index" pages
// through the index of ACTIVE conversations (what Open does), "full" lists
// every conversation and keeps the ACTIVE ones (what Open did before the
// index), in the same run. The fill, a close and a reopen (so the reads
// start from the tables, as after a restart) are not measured; the time
// Open takes to build the index of a store written before it (a one-off,
// layout v2 to v3) is logged.
//
//	go test -run '^$' -bench BenchmarkResumeListing -benchtime 20x ./journal/pebblejournal/
func BenchmarkResumeListing(b *testing.B) {
	idle := 1_000_000
	if v := os.Getenv(ResumeIdleEnv); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(b, err, "%s", ResumeIdleEnv)
		idle = n
	}
	dir := b.TempDir()
	s, err := Open(dir, Options{})
	require.NoError(b, err)
	start := time.Now()
	want := fillForResume(b, s, idle, resumeActive)
	b.Logf("filled %d idle and %d active conversations in %v", idle, resumeActive, time.Since(start).Round(time.Millisecond))

	// Time the upgrade of the same data written by a v2 build.
	require.NoError(b, s.db.DeleteRange([]byte{famActive}, familyEnd(famActive), nil))
	require.NoError(b, s.putRawForTesting(layoutKey, []byte(layoutV2)))
	require.NoError(b, s.db.Flush())
	require.NoError(b, s.Close())
	start = time.Now()
	s, err = Open(dir, Options{})
	require.NoError(b, err)
	b.Logf("Open of the v2 store (builds the index from %d rows): %v", idle+resumeActive, time.Since(start).Round(time.Millisecond))
	require.NoError(b, s.db.Flush())
	require.NoError(b, s.Close())
	s, err = Open(dir, Options{})
	require.NoError(b, err)
	defer s.Close()

	b.Run("index", func(b *testing.B) {
		for b.Loop() {
			if got := resumeByIndex(b, s); len(got) != len(want) {
				b.Fatalf("index found %d active conversations, want %d", len(got), len(want))
			}
		}
	})
	b.Run("full", func(b *testing.B) {
		for b.Loop() {
			if got := resumeByFullListing(b, s); len(got) != len(want) {
				b.Fatalf("full listing found %d active conversations, want %d", len(got), len(want))
			}
		}
	})
}
