package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// Environment variables of the --server mode.
const (
	// envServer names the node's base URL when --server is not given.
	envServer = "LAZARUS_SERVER"
	// envToken holds the bearer token when --token is not given.
	envToken = "LAZARUS_TOKEN"
)

// remoteCallTimeout bounds one request of the --server mode (event
// streams excepted), so a node that stopped answering does not hang a
// command.
const remoteCallTimeout = time.Minute

// errUnauthenticated: the node refused the token (401).
var errUnauthenticated = errors.New("the node refused the credentials (pass --token or set $" + envToken + ")")

// withServer adds --server and --token: the command then works on a live
// node through its HTTP API instead of a store.
func (fs *flags) withServer() *flags {
	fs.server = fs.String("server", "", "work on a live node at this `URL` through its HTTP API (default $"+envServer+")")
	fs.token = fs.String("token", "", "the bearer `token` for --server (default $"+envToken+")")
	return fs
}

// remote is a client of a node's HTTP API.
type remote struct {
	base  string // without a trailing slash
	token string
	hc    *http.Client
}

// remote returns the node the command works on, or nil for a store.
// --server (or the top-level one, or $LAZARUS_SERVER unless a store is
// named by flag) selects it.
func (c *cli) remote(fs *flags) (*remote, error) {
	var base string
	switch {
	case fs.server != nil && *fs.server != "":
		base = *fs.server
	case c.server != "":
		base = c.server
	case fs.dir == "" && c.dir == "" && fs.postgres == "" && c.postgres == "":
		base = c.getenv(envServer)
	}
	if base == "" {
		if (fs.token != nil && *fs.token != "") || c.token != "" {
			// A token given for a node, and no node named: the command
			// would read the local store instead, silently.
			return nil, usagef("--token is for --server (or $%s): no node to send it to", envServer)
		}
		return nil, nil
	}
	if fs.dir != "" || c.dir != "" || fs.postgres != "" || c.postgres != "" {
		return nil, usagef("--server and a store (--dir, --postgres) both given")
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usagef("--server %q is not an http(s) URL", base)
	}
	token := c.token
	if fs.token != nil && *fs.token != "" {
		token = *fs.token
	}
	if token == "" {
		token = c.getenv(envToken)
	}
	hc := c.httpClient
	if hc == nil {
		hc = http.DefaultClient
	}
	return &remote{base: strings.TrimRight(base, "/"), token: token, hc: hc}, nil
}

// apiError is an error answer of the node, mapped to the sentinel of its
// code so that exit statuses are those of the offline mode.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s (HTTP %d, %s)", e.msg, e.status, e.code)
}

// Unwrap maps the API's codes to the sentinels the node's error wrapped
// (the server's classify in reverse), which the exit status reads: ended
// is journal.ErrEnded, timeout context.DeadlineExceeded (a node's
// deadline, not this command's context), closed and unavailable
// journal.ErrUnavailable (try again later), unsupported
// errors.ErrUnsupported (the node's store keeps no schedules),
// too_many_subscriptions lazarus.ErrTooManySubscriptions (the
// conversation's streams are at the node's cap: try again later). A code of no sentinel
// (unauthenticated, method_not_allowed, lagged, internal, one this
// version does not know) wraps nothing.
func (e *apiError) Unwrap() []error {
	switch e.code {
	case server.CodeNotFound:
		return []error{journal.ErrNotFound}
	case server.CodeDeleted:
		return []error{journal.ErrDeleted, journal.ErrNotFound}
	case server.CodeStale:
		return []error{journal.ErrStale}
	case server.CodeConflict:
		return []error{journal.ErrConflict}
	case server.CodeInvalid, server.CodeTooLarge:
		return []error{journal.ErrInvalid}
	case server.CodeForbidden:
		return []error{lazarus.ErrForbidden}
	case server.CodeClosed, server.CodeUnavailable:
		return []error{journal.ErrUnavailable}
	case server.CodeUnknownOutcome:
		return []error{lazarus.ErrUnknownOutcome}
	case server.CodeEnded:
		return []error{journal.ErrEnded}
	case server.CodeTimeout:
		return []error{context.DeadlineExceeded}
	case server.CodeUnsupported:
		return []error{errors.ErrUnsupported}
	case server.CodeTooManySubscriptions:
		return []error{lazarus.ErrTooManySubscriptions}
	}
	return nil
}

// request sends one request and returns the response when its status is
// 2xx; otherwise the node's error.
func (r *remote) request(ctx context.Context, method, path string, body any, header http.Header) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, rd)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", r.base, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var eb struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &eb) != nil || eb.Error.Code == "" {
		return nil, &apiError{status: resp.StatusCode, code: "http", msg: strings.TrimSpace(string(b))}
	}
	ae := &apiError{status: resp.StatusCode, code: eb.Error.Code, msg: eb.Error.Message}
	if ae.code == server.CodeUnauthenticated {
		return nil, fmt.Errorf("%w: %w", errUnauthenticated, ae)
	}
	return nil, ae
}

// call sends one request and decodes its JSON answer into out (if not
// nil), within remoteCallTimeout.
func (r *remote) call(ctx context.Context, method, path string, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, remoteCallTimeout)
	defer cancel()
	resp, err := r.request(ctx, method, path, body, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("node %s: %s %s: bad answer: %w", r.base, method, path, err)
	}
	return nil
}

func pathID(prefix, id string) string { return prefix + url.PathEscape(id) }

// conversation reads one conversation; a missing one is an error wrapping
// journal.ErrNotFound, worded as the offline commands word it.
func (r *remote) conversation(ctx context.Context, id string) (*server.Conversation, error) {
	var cv server.Conversation
	if err := r.call(ctx, http.MethodGet, pathID("/v1/conversations/", id), nil, &cv); err != nil {
		if noConversation(err) {
			return nil, fmt.Errorf("no conversation %s: %w", displayID(id), err)
		}
		return nil, err
	}
	return &cv, nil
}

var unmarshalEvent = protojson.UnmarshalOptions{DiscardUnknown: true}

// history reads one page of events: the newest limit before before (0: the
// end of the log), ascending, and the cursor of the page before it.
func (r *remote) history(ctx context.Context, id string, before uint64, limit int) ([]*messages.Event, uint64, error) {
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if before > 0 {
		q.Set("before", strconv.FormatUint(before, 10))
	}
	var page server.EventPage
	if err := r.call(ctx, http.MethodGet, pathID("/v1/conversations/", id)+"/events?"+q.Encode(), nil, &page); err != nil {
		return nil, 0, err
	}
	evs := make([]*messages.Event, 0, len(page.Events))
	for _, raw := range page.Events {
		ev := &messages.Event{}
		if err := unmarshalEvent.Unmarshal(raw, ev); err != nil {
			return nil, 0, fmt.Errorf("node %s: bad event: %w", r.base, err)
		}
		evs = append(evs, ev)
	}
	return evs, page.NextBefore, nil
}

// lastSeq is the seq of the conversation's last event (0 for none).
func (r *remote) lastSeq(ctx context.Context, id string) (uint64, error) {
	evs, _, err := r.history(ctx, id, 0, 1)
	if err != nil || len(evs) == 0 {
		return 0, err
	}
	return evs[len(evs)-1].GetSeq(), nil
}

// storedEvents is the number of events the conversation's log holds (see
// heldEvents).
func (r *remote) storedEvents(ctx context.Context, id string) (uint64, error) {
	last, err := r.lastSeq(ctx, id)
	if err != nil {
		return 0, err
	}
	return r.eventsUpTo(ctx, id, last)
}

// eventsUpTo is the number of events the conversation's log holds up to
// seq last, a last seq the caller read (see heldEvents).
func (r *remote) eventsUpTo(ctx context.Context, id string, last uint64) (uint64, error) {
	return heldEvents(last, func(seq uint64) (bool, error) {
		evs, _, err := r.history(ctx, id, seq+1, 1)
		return len(evs) > 0 && evs[len(evs)-1].GetSeq() == seq, err
	})
}

// events reads the events of (after, before) (before 0: the end), the
// newest limit of them (0: all), ascending. A page whose next_before does
// not go back fails with an error wrapping errCursorStuck.
func (r *remote) events(ctx context.Context, id string, after, before uint64, limit int) ([]*messages.Event, error) {
	var out []*messages.Event // newest pages first, each ascending
	for {
		size := server.MaxPageSize
		if limit > 0 {
			size = min(size, limit-len(out))
		}
		page, next, err := r.history(ctx, id, before, size)
		if err != nil {
			return nil, err
		}
		for i := len(page) - 1; i >= 0; i-- {
			if page[i].GetSeq() <= after || (limit > 0 && len(out) == limit) {
				next = 0
				break
			}
			out = append(out, page[i])
		}
		if next == 0 || len(page) == 0 || (limit > 0 && len(out) >= limit) {
			break
		}
		if before != 0 && next >= before {
			// Pages run back towards seq 1: one that does not move on
			// would be read for ever.
			return nil, fmt.Errorf("node %s: history of %q: next_before %d after a page before %d: %w", r.base, id, next, before, errCursorStuck)
		}
		before = next
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// errCursorStuck: a node (or, offline, the store: eachStorePage) answered
// a page of a listing with a next cursor that does not move on (one it
// gave before in the listing, or for an ordered one not after the page's
// own), which would page for ever.
var errCursorStuck = errors.New("the next cursor does not move on")

// eachPage reads every page of the listing what: page reads the page
// after cursor ("" for the first) and returns its next cursor ("" after
// the last). A next cursor the listing gave before fails with an error
// wrapping errCursorStuck, as does, when the cursors are ordered (ids the
// pages run in ascending order of), one not after the cursor of its page:
// a node that does not move on cannot page for ever. (A sealed cursor is
// made anew each time, so a node that seals the same position again is
// not caught here.)
func (r *remote) eachPage(what string, ordered bool, page func(cursor string) (next string, err error)) error {
	seen := map[string]bool{}
	cursor := ""
	for {
		next, err := page(cursor)
		if err != nil || next == "" {
			return err
		}
		if seen[next] || (ordered && next <= cursor) {
			return fmt.Errorf("node %s: %s: next cursor %q after %q: %w", r.base, what, next, cursor, errCursorStuck)
		}
		seen[next] = true
		cursor = next
	}
}

// pendingCalls lists every pending human call the token sees.
func (r *remote) pendingCalls(ctx context.Context) ([]server.Call, error) {
	var out []server.Call
	err := r.eachPage("calls", false, func(cursor string) (string, error) {
		q := url.Values{"limit": {strconv.Itoa(server.MaxPageSize)}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page server.CallList
		if err := r.call(ctx, http.MethodGet, "/v1/calls?"+q.Encode(), nil, &page); err != nil {
			return "", err
		}
		out = append(out, page.Calls...)
		return page.NextCursor, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// callRecord is the row of the offline commands for a call of the API.
func callRecord(c server.Call) *messages.ToolCallRecord {
	rec := &messages.ToolCallRecord{Id: c.ID, ConversationId: c.ConversationID, Name: c.Tool, Prompt: c.Prompt,
		Args: string(c.Arguments), Executor: messages.Executor_EXECUTOR_HUMAN}
	if c.Created != nil {
		rec.Created = journal.Timestamp(*c.Created)
	}
	if c.Deadline != nil {
		rec.Deadline = journal.Timestamp(*c.Deadline)
	}
	return rec
}

// statusOf maps the API's status names to the store's.
func statusOf(name string) messages.ConversationStatus {
	switch name {
	case "active":
		return messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE
	case "suspended":
		return messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED
	case "idle":
		return messages.ConversationStatus_CONVERSATION_STATUS_IDLE
	case "ended":
		return messages.ConversationStatus_CONVERSATION_STATUS_ENDED
	}
	return messages.ConversationStatus_CONVERSATION_STATUS_UNSPECIFIED
}

// conversations lists one page of conversations, with their last seq and
// their pending human calls.
func (r *remote) conversations(ctx context.Context, cursor string, limit int, key, value string) ([]conversationJSON, string, error) {
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if key != "" {
		q.Set("metadata["+key+"]", value)
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var page server.ConversationList
	if err := r.call(ctx, http.MethodGet, "/v1/conversations?"+q.Encode(), nil, &page); err != nil {
		return nil, "", err
	}
	calls, err := r.pendingCalls(ctx)
	if err != nil {
		return nil, "", err
	}
	pending := map[string]int{}
	for _, c := range calls {
		pending[c.ConversationID]++
	}
	out := make([]conversationJSON, 0, len(page.Conversations))
	for _, cv := range page.Conversations {
		last, err := r.lastSeq(ctx, cv.ID)
		if err != nil {
			if noConversation(err) {
				continue // deleted since it was listed
			}
			return nil, "", err
		}
		cj := conversationJSON{ID: cv.ID, Status: statusName(statusOf(cv.Status)), LastSeq: last, PendingCalls: pending[cv.ID]}
		if cv.Created != nil {
			cj.Created = stamp(journal.Timestamp(*cv.Created))
		}
		if cv.Updated != nil {
			cj.Updated = stamp(journal.Timestamp(*cv.Updated))
		}
		out = append(out, cj)
	}
	return out, page.NextCursor, nil
}

// eachConversation calls fn for every conversation the token sees.
func (r *remote) eachConversation(ctx context.Context, fn func(server.Conversation) error) error {
	return r.eachPage("conversations", false, func(cursor string) (string, error) {
		q := url.Values{"limit": {strconv.Itoa(server.MaxPageSize)}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page server.ConversationList
		if err := r.call(ctx, http.MethodGet, "/v1/conversations?"+q.Encode(), nil, &page); err != nil {
			return "", err
		}
		for _, cv := range page.Conversations {
			if err := fn(cv); err != nil {
				return "", err
			}
		}
		return page.NextCursor, nil
	})
}

// stats counts what the token sees: conversations by status, their
// events, and the pending human calls with their deadlines.
func (r *remote) stats(ctx context.Context, now time.Time) (*statsJSON, error) {
	s := &statsJSON{ByStatus: map[string]int{}}
	err := r.eachConversation(ctx, func(cv server.Conversation) error {
		held, err := r.storedEvents(ctx, cv.ID)
		if noConversation(err) {
			return nil // deleted since it was listed
		}
		if err != nil {
			return err
		}
		s.Conversations++
		s.ByStatus[statusName(statusOf(cv.Status))]++
		s.Events += held
		return nil
	})
	if err != nil {
		return nil, err
	}
	calls, err := r.pendingCalls(ctx)
	if err != nil {
		return nil, err
	}
	for _, c := range calls {
		s.PendingCalls++
		s.PendingHuman++
		if c.Deadline != nil {
			s.Deadlines++
			if !c.Deadline.After(now) {
				s.Overdue++
			}
		}
	}
	return s, nil
}
