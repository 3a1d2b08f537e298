package journaltest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// snapshot is everything the read methods show about some conversations
// and tool call ids, and the store-wide lists.
type snapshot struct {
	convs     map[string]*convSnapshot
	calls     map[string]*messages.ToolCallRecord // nil: ErrNotFound
	deadlines []*messages.Deadline                // of the snapshot's conversations
	listed    []*messages.Conversation            // ListConversations, every page, the snapshot's conversations only
	active    []string                            // ListActiveConversations, every page, the snapshot's conversations only
}

type convSnapshot struct {
	row       *messages.Conversation // nil: ErrNotFound or ErrDeleted
	deleted   bool                   // the row lookup said ErrDeleted
	lastSeq   uint64
	events    []*messages.Event
	summaries []*messages.Summary // latest first, following SummaryBefore
	loadSum   *messages.Summary
	loadEvs   []*messages.Event
	pending   []*messages.ToolCallRecord
	meta      map[string]string
	audit     []*messages.ModelCall
}

// snapshotOf reads a snapshot through the public API, failing t on any
// unexpected error.
func snapshotOf(t testing.TB, s journal.Store, convs, calls []string) *snapshot {
	t.Helper()
	snap, err := readSnapshot(t.Context(), s, convs, calls)
	require.NoError(t, err)
	return snap
}

func readSnapshot(ctx context.Context, s journal.Store, convs, calls []string) (*snapshot, error) {
	snap := &snapshot{convs: make(map[string]*convSnapshot), calls: make(map[string]*messages.ToolCallRecord)}
	for _, id := range convs {
		c := &convSnapshot{}
		var err error
		c.row, err = s.Conversation(ctx, id)
		switch {
		case errors.Is(err, journal.ErrDeleted):
			c.deleted = true
		case err != nil && !errors.Is(err, journal.ErrNotFound):
			return nil, fmt.Errorf("read Conversation(%q): %w", id, err)
		}
		if c.lastSeq, err = s.LastSeq(ctx, id); err != nil {
			return nil, fmt.Errorf("read LastSeq(%q): %w", id, err)
		}
		if c.events, err = s.Events(ctx, id, journal.EventQuery{}); err != nil {
			return nil, fmt.Errorf("read Events(%q): %w", id, err)
		}
		sum, err := s.LatestSummary(ctx, id)
		for err == nil && len(c.summaries) <= len(c.events) {
			c.summaries = append(c.summaries, sum)
			sum, err = s.SummaryBefore(ctx, id, sum.GetToSeq())
		}
		if !errors.Is(err, journal.ErrNotFound) {
			return nil, fmt.Errorf("summaries of %q: %v", id, err)
		}
		if c.loadSum, c.loadEvs, err = s.LoadSince(ctx, id); err != nil {
			return nil, fmt.Errorf("read LoadSince(%q): %w", id, err)
		}
		if c.pending, err = s.PendingToolCalls(ctx, id); err != nil {
			return nil, fmt.Errorf("read PendingToolCalls(%q): %w", id, err)
		}
		if c.meta, err = s.Metadata(ctx, id); err != nil {
			return nil, fmt.Errorf("read Metadata(%q): %w", id, err)
		}
		if c.audit, err = s.ModelCalls(ctx, id); err != nil {
			return nil, fmt.Errorf("read ModelCalls(%q): %w", id, err)
		}
		snap.convs[id] = c
	}
	for _, id := range calls {
		row, err := s.ToolCall(ctx, id)
		if err != nil && !errors.Is(err, journal.ErrNotFound) {
			return nil, fmt.Errorf("read ToolCall(%q): %w", id, err)
		}
		snap.calls[id] = row
	}
	err := s.Deadlines(ctx, time.Time{}, func(d *messages.Deadline) error {
		if _, ok := snap.convs[d.GetConversationId()]; ok {
			snap.deadlines = append(snap.deadlines, d)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read Deadlines: %w", err)
	}
	cursor := ""
	for {
		rows, next, err := s.ListConversations(ctx, cursor, 0)
		if err != nil {
			return nil, fmt.Errorf("read ListConversations(%q): %w", cursor, err)
		}
		for _, r := range rows {
			if _, ok := snap.convs[r.GetId()]; ok {
				snap.listed = append(snap.listed, r)
			}
		}
		if next == "" {
			break
		}
		if next <= cursor {
			return nil, fmt.Errorf("read ListConversations(%q) returned cursor %q, which does not move forward", cursor, next)
		}
		cursor = next
	}
	active, err := listActive(ctx, s, 0)
	if err != nil {
		return nil, err
	}
	for _, id := range active {
		c, ok := snap.convs[id]
		if !ok {
			continue
		}
		snap.active = append(snap.active, id)
		if c.row.GetStatus() != messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE {
			return nil, fmt.Errorf("ListActiveConversations lists %q, whose row is %v", id, show(c.row))
		}
	}
	for id, c := range snap.convs {
		if c.row.GetStatus() == messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE && !slices.Contains(snap.active, id) {
			return nil, fmt.Errorf("ListActiveConversations does not list %q, whose row is ACTIVE", id)
		}
	}
	return snap, nil
}

// withoutTimes returns a copy of snap whose conversation rows have no
// created and updated times (which an adapter may take from its clock).
func (snap *snapshot) withoutTimes() *snapshot {
	out := *snap
	out.convs = make(map[string]*convSnapshot, len(snap.convs))
	strip := func(r *messages.Conversation) *messages.Conversation {
		if r == nil {
			return nil
		}
		r = cloneOf(r)
		r.Created, r.Updated = nil, nil
		return r
	}
	for id, c := range snap.convs {
		cc := *c
		cc.row = strip(c.row)
		out.convs[id] = &cc
	}
	out.listed = make([]*messages.Conversation, len(snap.listed))
	for i, r := range snap.listed {
		out.listed[i] = strip(r)
	}
	return &out
}

// diff describes the first difference between two snapshots, "" if none.
func (snap *snapshot) diff(other *snapshot) string {
	ids := slices.Sorted(maps.Keys(snap.convs))
	for _, id := range ids {
		a, b := snap.convs[id], other.convs[id]
		if b == nil {
			return fmt.Sprintf("conversation %q: missing", id)
		}
		if d := diffProto("row", a.row, b.row); d != "" {
			return fmt.Sprintf("conversation %q: %s", id, d)
		}
		if a.deleted != b.deleted {
			return fmt.Sprintf("conversation %q: deleted %v vs %v", id, a.deleted, b.deleted)
		}
		if a.lastSeq != b.lastSeq {
			return fmt.Sprintf("conversation %q: last seq %d vs %d", id, a.lastSeq, b.lastSeq)
		}
		for _, d := range []string{
			diffProtos("events", a.events, b.events),
			diffProtos("summaries", a.summaries, b.summaries),
			diffProto("LoadSince summary", a.loadSum, b.loadSum),
			diffProtos("LoadSince events", a.loadEvs, b.loadEvs),
			diffProtos("pending tool calls", a.pending, b.pending),
			diffProtos("model calls", a.audit, b.audit),
		} {
			if d != "" {
				return fmt.Sprintf("conversation %q: %s", id, d)
			}
		}
		if !maps.Equal(a.meta, b.meta) {
			return fmt.Sprintf("conversation %q: metadata %v vs %v", id, a.meta, b.meta)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(snap.calls)) {
		if d := diffProto("row", snap.calls[id], other.calls[id]); d != "" {
			return fmt.Sprintf("tool call %q: %s", id, d)
		}
	}
	if d := diffProtos("deadlines", snap.deadlines, other.deadlines); d != "" {
		return d
	}
	if d := diffProtos("listed conversations", snap.listed, other.listed); d != "" {
		return d
	}
	if !slices.Equal(snap.active, other.active) {
		return fmt.Sprintf("active conversations differ\n  %q\n  %q", snap.active, other.active)
	}
	return ""
}

func diffProto[M proto.Message](what string, a, b M) string {
	if proto.Equal(a, b) {
		return ""
	}
	return fmt.Sprintf("%s differs\n  %s\n  %s", what, show(a), show(b))
}

func diffProtos[M proto.Message](what string, a, b []M) string {
	if protosEqual(a, b) {
		return ""
	}
	return fmt.Sprintf("%s differ\n  %d: %s\n  %d: %s", what, len(a), showAll(a), len(b), showAll(b))
}

// requireSameSnapshot fails t, naming the first difference, unless want and
// got are equal.
func requireSameSnapshot(t testing.TB, want, got *snapshot, msgAndArgs ...any) {
	t.Helper()
	if d := want.diff(got); d != "" {
		require.Fail(t, "the store changed: "+d, msgAndArgs...)
	}
}
