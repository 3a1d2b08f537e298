package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

var conversationsCmd = &command{
	name:     "conversations",
	aliases:  []string{"list"},
	synopsis: "[--where KEY=VALUE] [--cursor ID] [--limit N] [--json]",
	summary:  "list conversations with status, last seq and pending calls (also: list)",
	help: `
Lists conversations in id order, one per line: id, status (active,
suspended, idle, ended), the seq of the last event, the number of pending
tool calls (human and server; with --server, human calls only: what the
node's API lists) and when the row last changed.

With --where KEY=VALUE, only the conversations whose metadata holds KEY
with exactly VALUE (a title under "name", say), read from the store's
metadata index (with --server, the node's metadata[KEY]=VALUE filter).

Pages: --limit conversations per page (1..10000; with --server, up to
the node's page size, 1000); when there are more, the last line
is "next cursor: ID"; pass it as --cursor to read the next page (an id
with spaces or control characters is printed quoted, Go style; --json
gives it verbatim). With
--json the document is {"conversations": [...], "next_cursor": "..."}
(next_cursor empty on the last page).`,
	run:    (*cli).conversations,
	remote: true,
}

// conversationJSON is one conversation in --json output.
type conversationJSON struct {
	ID           string `json:"id"`
	Status       string `json:"status"`
	LastSeq      uint64 `json:"last_seq"`
	PendingCalls int    `json:"pending_calls"`
	Created      string `json:"created,omitempty"`
	Updated      string `json:"updated,omitempty"`
}

func (c *cli) conversations(ctx context.Context, fs *flags, args []string) (err error) {
	fs.withJSON().withServer()
	cursor := fs.String("cursor", "", "start after this conversation `id` (the next cursor a previous page printed)")
	limit := fs.Int("limit", 100, "conversations per page, 1..10000")
	where := fs.String("where", "", "only the conversations whose metadata holds `KEY=VALUE`")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	var key, value string
	if *where != "" {
		var ok bool
		key, value, ok = strings.Cut(*where, "=")
		if !ok || key == "" || value == "" {
			return usagef("--where must be KEY=VALUE with both non-empty, not %q", *where)
		}
		if _, _, err := journal.ParseFind(key, value, "", 1); err != nil {
			return usagef("--where: %v", err)
		}
	}
	if *limit < 1 || *limit > 10000 {
		return usagef("--limit must be in 1..10000, not %d", *limit)
	}
	rc, err := c.remote(fs)
	if err != nil {
		return err
	}
	if rc != nil {
		if *limit > server.MaxPageSize {
			return usagef("--limit must be in 1..%d with --server, not %d", server.MaxPageSize, *limit)
		}
		out, next, err := rc.conversations(ctx, *cursor, *limit, key, value)
		if err != nil {
			return err
		}
		return c.printConversations(out, next, *fs.json)
	}
	st, _, err := c.openStore(fs, false)
	if err != nil {
		return err
	}
	defer closeStore(st, &err)
	var rows []*messages.Conversation
	var next string
	if key != "" {
		rows, next, err = foundRows(ctx, st, key, value, *cursor, *limit)
	} else {
		rows, next, err = st.ListConversations(ctx, *cursor, *limit)
	}
	if err != nil {
		return err
	}
	out := make([]conversationJSON, 0, len(rows))
	for _, row := range rows {
		last, err := st.LastSeq(ctx, row.GetId())
		if err != nil {
			return err
		}
		pending, err := st.PendingToolCalls(ctx, row.GetId())
		if err != nil {
			return err
		}
		cj := conversationJSON{ID: row.GetId(), Status: statusName(row.GetStatus()), LastSeq: last, PendingCalls: len(pending)}
		if row.GetCreated() != nil {
			cj.Created = stamp(row.GetCreated())
		}
		if row.GetUpdated() != nil {
			cj.Updated = stamp(row.GetUpdated())
		}
		out = append(out, cj)
	}
	return c.printConversations(out, next, *fs.json)
}

// foundRows reads a page of FindConversations and the rows of the ids
// found (an id without a row, deleted since or with metadata only, is left
// out).
func foundRows(ctx context.Context, st journal.Store, key, value, cursor string, limit int) ([]*messages.Conversation, string, error) {
	ids, next, err := st.FindConversations(ctx, key, value, cursor, limit)
	if err != nil {
		return nil, "", err
	}
	rows := make([]*messages.Conversation, 0, len(ids))
	for _, id := range ids {
		row, err := st.Conversation(ctx, id)
		switch {
		case errors.Is(err, journal.ErrNotFound) || errors.Is(err, journal.ErrDeleted):
			continue
		case err != nil:
			return nil, "", err
		}
		rows = append(rows, row)
	}
	return rows, next, nil
}

// printConversations prints a page of conversations.
func (c *cli) printConversations(out []conversationJSON, next string, asJSON bool) error {
	if asJSON {
		return writeJSON(c.stdout, struct {
			Conversations []conversationJSON `json:"conversations"`
			NextCursor    string             `json:"next_cursor"`
		}{out, next})
	}
	tw := tabwriter.NewWriter(c.stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tLAST_SEQ\tPENDING\tUPDATED")
	for _, cj := range out {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", displayID(cj.ID), cj.Status, cj.LastSeq, cj.PendingCalls, orDash(cj.Updated))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(c.stdout, "next cursor: %s\n", displayID(next))
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

var showCmd = &command{
	name:     "show",
	synopsis: "ID [--from SEQ] [--before SEQ] [--limit N] [--full] [--json]",
	summary:  "print a conversation's log, one line per event, newest last",
	help: `
Prints the conversation's events in ascending seq, one line each: seq, time
(UTC), type, and a summary (texts quoted, JSON compacted, clipped to 120
characters unless --full). The conversation's metadata, if any, comes
first, one "-- metadata KEY: "VALUE"" line per key, sorted by key.

Without --from: the newest --limit events (before --before, if given).
With --from SEQ: the first --limit events after SEQ (SEQ is exclusive), so
paging forward is --from with the last seq printed. The last lines say how
to read the neighbouring pages ("-- older: --before N", "-- newer: --from N"),
--from or not, whenever the log holds events before or after those printed;
a --from at or past the last seq prints no events, says so, and offers the
page before it.
A fork's log (Runtime.Fork) starts after the summary it copied: its
first page starts there, and there is no older page before it.

With --json the document is {"conversation_id", "last_seq", "metadata": {...},
"events": [...], "next_from", "prev_before"}: events in protojson (field names as in the
.proto files), next_from/prev_before 0 when there is no such page.`,
	run:    (*cli).show,
	remote: true,
}

func (c *cli) show(ctx context.Context, fs *flags, args []string) (err error) {
	fs.withJSON().withServer()
	from := fs.Uint64("from", 0, "show events after this `seq` (exclusive), oldest first")
	before := fs.Uint64("before", 0, "show events before this `seq` (exclusive); 0 means the end of the log")
	limit := fs.Int("limit", 50, "events per page; 0 means all")
	full := fs.Bool("full", false, "do not clip texts and JSON")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *limit < 0 {
		return usagef("--limit must not be negative")
	}
	if *before != 0 && *before-1 <= *from {
		return usagef("--before %d leaves no seq after --from %d (both are exclusive)", *before, *from)
	}
	id := pos[0]
	if err := journal.ValidateID("conversation id", id); err != nil {
		return usagef("%v", err)
	}
	rc, err := c.remote(fs)
	if err != nil {
		return err
	}
	if rc != nil {
		return c.showRemote(ctx, rc, fs, id, *from, *before, *limit, *full)
	}
	st, _, err := c.openStore(fs, false)
	if err != nil {
		return err
	}
	defer closeStore(st, &err)
	if _, err := st.Conversation(ctx, id); err != nil {
		if noConversation(err) {
			return fmt.Errorf("no conversation %s: %w", displayID(id), journal.ErrNotFound)
		}
		return err
	}
	md, err := st.Metadata(ctx, id)
	if err != nil {
		return err
	}
	if md == nil {
		md = map[string]string{}
	}
	last, err := st.LastSeq(ctx, id)
	if err != nil {
		return err
	}
	// Counted in the log up to the same last: a write meanwhile (a live
	// node on the same PostgreSQL) must not make first wrap.
	held, err := eventsUpTo(ctx, st, id, last)
	if err != nil {
		return err
	}
	first := last - held + 1
	q := journal.EventQuery{After: *from, Before: *before, Limit: *limit}
	if isSet(fs, "from") && !isSet(fs, "before") && *limit > 0 {
		q.Limit, q.Before = 0, forwardBefore(*from, first, *limit)
	}
	evs, err := st.Events(ctx, id, q)
	if err != nil {
		return err
	}
	return c.printShow(id, md, evs, *from, last, first, *fs.json, *full)
}

// forwardBefore is the exclusive end of a forward page (show --from):
// the first limit events after from, in a log held from seq first (a
// fork's starts after the summary it copied), 0 (the end) if it is past
// the last seq there can be.
func forwardBefore(from, first uint64, limit int) uint64 {
	lo := max(from, first-1)
	if lo > math.MaxUint64-uint64(limit)-1 {
		return 0
	}
	return lo + uint64(limit) + 1
}

// showRemote is show on a live node.
func (c *cli) showRemote(ctx context.Context, rc *remote, fs *flags, id string, from, before uint64, limit int, full bool) error {
	cv, err := rc.conversation(ctx, id)
	if err != nil {
		return err
	}
	last, err := rc.lastSeq(ctx, id)
	if err != nil {
		return err
	}
	held, err := rc.eventsUpTo(ctx, id, last) // see show
	if err != nil {
		return err
	}
	first := last - held + 1
	if isSet(fs, "from") && !isSet(fs, "before") && limit > 0 {
		before = forwardBefore(from, first, limit)
	}
	evs, err := rc.events(ctx, id, from, before, limit)
	if err != nil {
		return err
	}
	return c.printShow(id, cv.Metadata, evs, from, last, first, *fs.json, full)
}

// printShow prints what show read: the metadata, the events and the
// neighbouring pages, of a log held from seq first to last (a fork's
// starts after the summary it copied: there is no older page before it).
// The older page is offered whenever seqs before the first one printed
// are held, --from or not: --from bounds this page, not the log. from is
// --from (0 when not given): at or past last, no event is printed, and the
// page offered is the one up to it.
func (c *cli) printShow(id string, md map[string]string, evs []*messages.Event, from, last, first uint64, asJSON, full bool) error {
	if md == nil {
		md = map[string]string{}
	}
	var nextFrom, prevBefore uint64
	if n := len(evs); n > 0 {
		if evs[n-1].GetSeq() < last {
			nextFrom = evs[n-1].GetSeq()
		}
		if evs[0].GetSeq() > first {
			prevBefore = evs[0].GetSeq()
		}
	} else if upTo := min(from, last); upTo >= first {
		// --from at or past the last seq: nothing after it, but the log
		// holds the events up to it.
		prevBefore = upTo + 1
	}
	if asJSON {
		raw := make([]json.RawMessage, 0, len(evs))
		for _, ev := range evs {
			b, err := protoJSON(ev)
			if err != nil {
				return err
			}
			raw = append(raw, b)
		}
		return writeJSON(c.stdout, struct {
			ConversationID string            `json:"conversation_id"`
			LastSeq        uint64            `json:"last_seq"`
			Metadata       map[string]string `json:"metadata"`
			Events         []json.RawMessage `json:"events"`
			NextFrom       uint64            `json:"next_from"`
			PrevBefore     uint64            `json:"prev_before"`
		}{id, last, md, raw, nextFrom, prevBefore})
	}
	for _, k := range slices.Sorted(maps.Keys(md)) {
		fmt.Fprintf(c.stdout, "-- metadata %s: %s\n", displayID(k), strconv.Quote(md[k]))
	}
	for _, ev := range evs {
		fmt.Fprintln(c.stdout, eventLine(ev, full))
	}
	switch {
	case len(evs) == 0 && from > 0 && from >= last:
		fmt.Fprintf(c.stdout, "-- no events after --from %d (the last seq is %d)\n", from, last)
	case len(evs) == 0:
		fmt.Fprintln(c.stdout, "-- no events in this range")
	}
	if prevBefore != 0 {
		fmt.Fprintf(c.stdout, "-- older: --before %d\n", prevBefore)
	}
	if nextFrom != 0 {
		fmt.Fprintf(c.stdout, "-- newer: --from %d\n", nextFrom)
	}
	return nil
}

var statsCmd = &command{
	name:     "stats",
	synopsis: "[--json]",
	summary:  "count conversations, events, pending calls, deadlines; bytes on disk",
	help: `
Reads every conversation once and prints: conversations (by status),
events, pending tool calls (human and server), scheduled deadlines (and how
many are overdue), and the bytes of the store's files on disk. Events are
those the logs hold: a fork's log starts after the summary it copied, so
the events that summary covers are counted in its source only (the events
a fork copied are in both logs, and counted in both). The cost is one pass
over the conversation rows plus a few reads per conversation (a fork's
start is found in about log2(its last seq) more).

With --server it counts what the token sees through the API: pending
calls and deadlines are those of the human calls (the API does not list
server calls), and the bytes on disk are not measured ("-"; 0 in --json).`,
	run:    (*cli).stats,
	remote: true,
}

// statsJSON is the --json output of stats.
type statsJSON struct {
	Conversations int            `json:"conversations"`
	ByStatus      map[string]int `json:"by_status"`
	Events        uint64         `json:"events"`
	PendingCalls  int            `json:"pending_calls"`
	PendingHuman  int            `json:"pending_human"`
	PendingServer int            `json:"pending_server"`
	Deadlines     int            `json:"deadlines"`
	Overdue       int            `json:"overdue"`
	BytesOnDisk   int64          `json:"bytes_on_disk"`
}

func (c *cli) stats(ctx context.Context, fs *flags, args []string) (err error) {
	fs.withJSON().withServer()
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	rc, err := c.remote(fs)
	if err != nil {
		return err
	}
	if rc != nil {
		s, err := rc.stats(ctx, c.now())
		if err != nil {
			return err
		}
		return c.printStats(s, *fs.json, false)
	}
	st, dir, err := c.openStore(fs, false)
	if err != nil {
		return err
	}
	s, err := collectStats(ctx, st, c.now())
	if cerr := st.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close store: %w", cerr)
	}
	if err != nil {
		return err
	}
	// Measured once the store is closed: no file is changing.
	if dir != "" { // PostgreSQL: the server's disk is not ours to measure
		if s.BytesOnDisk, err = diskUsage(dir); err != nil {
			return err
		}
	}
	return c.printStats(s, *fs.json, true)
}

// printStats prints the statistics; measured says whether BytesOnDisk
// was.
func (c *cli) printStats(s *statsJSON, asJSON, measured bool) error {
	if asJSON {
		return writeJSON(c.stdout, s)
	}
	fmt.Fprintf(c.stdout, "conversations   %d", s.Conversations)
	sep := " ("
	for _, status := range []messages.ConversationStatus{
		messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE,
		messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED,
		messages.ConversationStatus_CONVERSATION_STATUS_IDLE,
		messages.ConversationStatus_CONVERSATION_STATUS_ENDED,
	} {
		fmt.Fprintf(c.stdout, "%s%s %d", sep, statusName(status), s.ByStatus[statusName(status)])
		sep = ", "
	}
	fmt.Fprintln(c.stdout, ")")
	fmt.Fprintf(c.stdout, "events          %d\n", s.Events)
	fmt.Fprintf(c.stdout, "pending calls   %d (human %d, server %d)\n", s.PendingCalls, s.PendingHuman, s.PendingServer)
	fmt.Fprintf(c.stdout, "deadlines       %d (overdue %d)\n", s.Deadlines, s.Overdue)
	if !measured {
		fmt.Fprintln(c.stdout, "bytes on disk   - (not measured through a node)")
		return nil
	}
	fmt.Fprintf(c.stdout, "bytes on disk   %d (%s)\n", s.BytesOnDisk, humanBytes(s.BytesOnDisk))
	return nil
}

func collectStats(ctx context.Context, st journal.Store, now time.Time) (*statsJSON, error) {
	s := &statsJSON{ByStatus: map[string]int{}}
	err := eachConversation(ctx, st, func(row *messages.Conversation) error {
		s.Conversations++
		s.ByStatus[statusName(row.GetStatus())]++
		held, err := storedEvents(ctx, st, row.GetId())
		if err != nil {
			return err
		}
		s.Events += held
		pending, err := st.PendingToolCalls(ctx, row.GetId())
		if err != nil {
			return err
		}
		for _, p := range pending {
			s.PendingCalls++
			if p.GetExecutor() == messages.Executor_EXECUTOR_HUMAN {
				s.PendingHuman++
			} else {
				s.PendingServer++
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = st.Deadlines(ctx, time.Time{}, func(d *messages.Deadline) error {
		s.Deadlines++
		if !d.GetAt().AsTime().After(now) {
			s.Overdue++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// storedEvents is the number of events the conversation's log holds (see
// heldEvents).
func storedEvents(ctx context.Context, st journal.Store, id string) (uint64, error) {
	last, err := st.LastSeq(ctx, id)
	if err != nil {
		return 0, err
	}
	return eventsUpTo(ctx, st, id, last)
}

// eventsUpTo is the number of events the conversation's log holds up to
// seq last, a LastSeq the caller read (see heldEvents).
func eventsUpTo(ctx context.Context, st journal.Store, id string, last uint64) (uint64, error) {
	return heldEvents(last, func(seq uint64) (bool, error) {
		evs, err := st.Events(ctx, id, journal.EventQuery{After: seq - 1, Before: seq + 1})
		return len(evs) > 0, err
	})
}

// heldEvents is the number of events a log ending at seq last holds: its
// seqs are gap-free, from 1, or for a fork from just after the summary it
// copied (the events that summary covers are not in its log). has reports
// whether the log holds seq (1 <= seq <= last); a fork's start is found by
// bisection, in about log2(last) calls.
func heldEvents(last uint64, has func(seq uint64) (bool, error)) (uint64, error) {
	if last == 0 {
		return 0, nil
	}
	if ok, err := has(1); err != nil || ok {
		return last, err
	}
	lo, hi := uint64(2), last // the first held seq is in [lo, hi]
	for lo < hi {
		mid := lo + (hi-lo)/2
		ok, err := has(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return last - lo + 1, nil
}

// eachConversation calls fn for every conversation row, in id order. A
// next cursor that is not after the page's own (ListConversations pages
// run in ascending order of id) fails with an error wrapping
// errCursorStuck (eachStorePage).
func eachConversation(ctx context.Context, st journal.Store, fn func(*messages.Conversation) error) error {
	return eachStorePage("conversations", func(next, cursor string) bool { return next > cursor }, func(cursor string) (string, error) {
		rows, next, err := st.ListConversations(ctx, cursor, 500)
		if err != nil {
			return "", err
		}
		for _, row := range rows {
			if err := fn(row); err != nil {
				return "", err
			}
		}
		return next, nil
	})
}

// eachStorePage reads every page of the store's listing what: page reads
// the page after cursor ("" for the first) and returns its next cursor (""
// after the last). A next cursor that is not after the cursor of its page,
// as after orders them (next, cursor), fails with an error wrapping
// errCursorStuck: a store that does not move on (a damaged one, or a
// faulty adapter) cannot page for ever. It is eachPage's offline twin.
func eachStorePage(what string, after func(next, cursor string) bool, page func(cursor string) (string, error)) error {
	cursor := ""
	for {
		next, err := page(cursor)
		if err != nil || next == "" {
			return err
		}
		if cursor != "" && !after(next, cursor) {
			return fmt.Errorf("store: %s: next cursor %q after %q: %w", what, next, cursor, errCursorStuck)
		}
		cursor = next
	}
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
