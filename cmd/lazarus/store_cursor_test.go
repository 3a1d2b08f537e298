package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

// errPagedTooLong: a cursorStore asked for more pages than a listing that
// moves on could need: without the check, the command would page for ever.
var errPagedTooLong = errors.New("paged past the cursor store's bound")

// cursorStore is a store whose ListConversations and ListPendingToolCalls
// answer each page with one row and the next cursor next[cursor] ("" when
// it has none, the last page), as a damaged store or a faulty adapter
// might. It counts the pages read, and refuses more than 10.
type cursorStore struct {
	journal.Store
	next  map[string]string
	pages int
}

func (s *cursorStore) page(cursor string) (string, error) {
	s.pages++
	if s.pages > 10 {
		return "", errPagedTooLong
	}
	return s.next[cursor], nil
}

func (s *cursorStore) ListConversations(_ context.Context, cursor string, _ int) ([]*messages.Conversation, string, error) {
	next, err := s.page(cursor)
	if err != nil {
		return nil, "", err
	}
	return []*messages.Conversation{{Id: "row"}}, next, nil
}

func (s *cursorStore) ListPendingToolCalls(_ context.Context, cursor string, _ int) ([]*messages.ToolCallRecord, string, error) {
	next, err := s.page(cursor)
	if err != nil {
		return nil, "", err
	}
	return []*messages.ToolCallRecord{{Id: "tc", ConversationId: "c", Executor: messages.Executor_EXECUTOR_HUMAN,
		Status: messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING}}, next, nil
}

// TestStoreListingsRefuseAStuckCursor: the offline listings that page the
// store itself (every conversation, for stats, gc-audit and export --all;
// every pending call, for pending) fail with an error wrapping
// errCursorStuck, status 1, after a page whose next cursor is not after
// its own (the same again, or one that goes back), rather than paging for
// ever. A listing whose cursors move on is read whole.
func TestStoreListingsRefuseAStuckCursor(t *testing.T) {
	ctx := t.Context()
	pc := journal.PendingCursor
	listings := []struct {
		name string
		// moving, same and back are the next cursors of a listing that
		// moves on, one that gives the same cursor again, and one that
		// goes back.
		moving, same, back map[string]string
		// list reads the listing and returns the rows read, the
		// exit status, and whether the error is errCursorStuck.
		list func(st journal.Store) (rows, code int, stuck bool)
	}{
		{
			name:   "conversations",
			moving: map[string]string{"": "a", "a": "b"},
			same:   map[string]string{"": "a", "a": "a"},
			back:   map[string]string{"": "b", "b": "a"},
			list: func(st journal.Store) (int, int, bool) {
				n := 0
				err := eachConversation(ctx, st, func(*messages.Conversation) error { n++; return nil })
				if err != nil {
					return n, exitCode(err), errors.Is(err, errCursorStuck)
				}
				return n, 0, false
			},
		},
		{
			name:   "pending calls",
			moving: map[string]string{"": pc("c", "tc-1"), pc("c", "tc-1"): pc("d", "tc-0")},
			same:   map[string]string{"": pc("c", "tc-1"), pc("c", "tc-1"): pc("c", "tc-1")},
			back:   map[string]string{"": pc("c", "tc-2"), pc("c", "tc-2"): pc("c", "tc-1")},
			list: func(st journal.Store) (int, int, bool) {
				var out, errb bytes.Buffer
				c := newCLI(strings.NewReader(""), &out, &errb)
				c.open = func(string, bool) (journal.Store, error) { return st, nil }
				code := c.run(ctx, []string{"pending", "--dir", t.TempDir(), "--json"})
				return strings.Count(out.String(), `"tc"`), code, strings.Contains(errb.String(), errCursorStuck.Error())
			},
		},
	}
	for _, l := range listings {
		t.Run(l.name, func(t *testing.T) {
			base := memjournal.New(memjournal.Options{})
			t.Cleanup(func() { _ = base.Close() })
			st := &cursorStore{Store: base, next: l.moving}
			n, code, _ := l.list(st)
			require.Zero(t, code, "cursors that move on")
			require.Equal(t, 3, n, "every page is read")
			require.Equal(t, 3, st.pages)
			for name, next := range map[string]map[string]string{"same cursor again": l.same, "a cursor that goes back": l.back} {
				st := &cursorStore{Store: base, next: next}
				_, code, stuck := l.list(st)
				require.True(t, stuck, "%s: the error wraps errCursorStuck", name)
				require.Equal(t, exitError, code, name)
				require.Equal(t, 2, st.pages, "%s: no page read after the one that does not move on", name)
			}
		})
	}
}
