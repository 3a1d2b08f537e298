package journal

import (
	"strconv"
	"strings"
)

// PendingCursor returns the cursor of ToolCalls.ListPendingToolCalls that
// resumes after the pending call toolCallID of conversationID: the next
// cursor a page returns is the PendingCursor of its last row. Every adapter
// uses this encoding, so a cursor stays valid across adapters and a caller
// that filters a page may resume after any row it kept.
func PendingCursor(conversationID, toolCallID string) string {
	return strconv.Itoa(len(conversationID)) + ":" + conversationID + toolCallID
}

// maxPendingCursorBytes is the length of the longest PendingCursor of two
// valid ids.
var maxPendingCursorBytes = len(strconv.Itoa(MaxIDBytes)) + 1 + 2*MaxIDBytes

// ParsePendingCursor decodes a cursor made by PendingCursor. The empty
// cursor (the first page) gives two empty ids. Anything else that is not a
// PendingCursor of two valid ids is ErrInvalid.
func ParsePendingCursor(cursor string) (conversationID, toolCallID string, err error) {
	if cursor == "" {
		return "", "", nil
	}
	if len(cursor) > maxPendingCursorBytes {
		// Refused by its size alone, so the error does not quote it.
		return "", "", Invalidf("pending-call cursor of %d bytes exceeds %d", len(cursor), maxPendingCursorBytes)
	}
	n, rest, ok := strings.Cut(cursor, ":")
	size, perr := strconv.Atoi(n)
	if !ok || perr != nil || size < 0 || size > len(rest) || strconv.Itoa(size) != n {
		return "", "", Invalidf("malformed pending-call cursor %q", cursor)
	}
	conversationID, toolCallID = rest[:size], rest[size:]
	if err := ValidateID("cursor's conversation id", conversationID); err != nil {
		return "", "", err
	}
	if err := ValidateID("cursor's tool call id", toolCallID); err != nil {
		return "", "", err
	}
	return conversationID, toolCallID, nil
}

// PendingAfter reports whether the pending call (conversationID,
// toolCallID) comes after the cursor's position in the order of
// ListPendingToolCalls: by conversation id, then tool call id, bytewise.
func PendingAfter(conversationID, toolCallID, cursorConv, cursorCall string) bool {
	if conversationID != cursorConv {
		return conversationID > cursorConv
	}
	return toolCallID > cursorCall
}

// DefaultPageSize is the page size of the listings (ListConversations,
// ListPendingToolCalls, ListActiveConversations) called with limit 0.
const DefaultPageSize = 100

// PageSize checks the limit of a listing named what and returns the page
// size to use: limit, or DefaultPageSize for 0. A negative limit is
// ErrInvalid, in every listing of a Store.
func PageSize(what string, limit int) (int, error) {
	switch {
	case limit < 0:
		return 0, Invalidf("negative limit %d of %s", limit, what)
	case limit == 0:
		return DefaultPageSize, nil
	}
	return limit, nil
}

// ActiveCursor returns the cursor of Conversations.ListActiveConversations
// that resumes after the conversation conversationID: the next cursor a
// page returns is the ActiveCursor of its last id. It is the id itself, so
// a caller may resume after any id it kept, listed or not.
func ActiveCursor(conversationID string) string { return conversationID }

// ParseActiveCursor decodes a cursor made by ActiveCursor and checks the
// limit of a ListActiveConversations call, returning the limit to use (100
// for 0). The empty cursor (the first page) gives the empty id. A cursor
// that is not a valid conversation id, or a negative limit, is ErrInvalid.
func ParseActiveCursor(cursor string, limit int) (conversationID string, pageSize int, err error) {
	limit, err = PageSize("active conversations", limit)
	if err != nil {
		return "", 0, err
	}
	if cursor == "" {
		return "", limit, nil
	}
	if err := ValidateID("active-conversation cursor", cursor); err != nil {
		return "", 0, err
	}
	return cursor, limit, nil
}
