package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// OwnerKey is the metadata key under which a conversation created through
// the API records its creator's user id. ReservedMetadataPrefix starts every
// key the server reserves: the API refuses to set such keys.
const (
	ReservedMetadataPrefix = "lazarus."
	OwnerKey               = ReservedMetadataPrefix + "owner"
)

// Conversation is a conversation as the API shows it.
type Conversation struct {
	ID string `json:"id"`
	// Status is "active" (a turn is owed or running), "suspended"
	// (waiting on human calls), "idle" or "ended".
	Status string `json:"status"`
	// Created and Updated are when the row was first and last written.
	Created *time.Time `json:"created,omitempty"`
	Updated *time.Time `json:"updated,omitempty"`
	// Metadata is the conversation's metadata, OwnerKey included.
	Metadata map[string]string `json:"metadata"`
}

// ConversationList is a page of conversations.
type ConversationList struct {
	Conversations []Conversation `json:"conversations"`
	// NextCursor resumes the listing; "" when there is no more.
	NextCursor string `json:"next_cursor"`
}

// CreateConversation is the body of POST /v1/conversations. New optional
// fields may be added; existing ones keep their meaning.
type CreateConversation struct {
	// Metadata to attach (keys as ids, not under ReservedMetadataPrefix).
	Metadata map[string]string `json:"metadata,omitempty"`
	// Settings are the conversation's own model settings (lazarus
	// Runtime.Configure); unset fields keep the node's defaults.
	Settings *Settings `json:"settings,omitempty"`
}

// Settings are a conversation's model settings (agent.Settings).
type Settings struct {
	SystemPrompt string   `json:"system_prompt,omitempty"`
	Model        string   `json:"model,omitempty"`
	Temperature  *float64 `json:"temperature,omitempty"`
	MaxTokens    int64    `json:"max_tokens,omitempty"`
	// ToolChoice is "auto", "none", "required" or a tool's name.
	ToolChoice string `json:"tool_choice,omitempty"`
}

func (s *Settings) agent() agent.Settings {
	if s == nil {
		return agent.Settings{}
	}
	return agent.Settings{SystemPrompt: s.SystemPrompt, Model: s.Model, Temperature: s.Temperature, MaxTokens: s.MaxTokens, ToolChoice: s.ToolChoice}
}

// SendMessage is the body of POST /v1/conversations/{id}/messages.
type SendMessage struct {
	// Text of the user message. Required, non-empty.
	Text string `json:"text"`
	// RequestID is the idempotency key (1 to 256 bytes): a send retried
	// with the same key appends nothing twice and answers the first seq.
	RequestID string `json:"request_id,omitempty"`
	// Agent addresses the message to a named agent of the runtime
	// (lazarus.SendOptions.Agent); an unknown one is a bad request. Empty
	// or "default" (as the agent query parameter names it): the default
	// agent.
	Agent string `json:"agent,omitempty"`
	// Broadcast shares the message with every agent
	// (lazarus.SendOptions.Broadcast).
	Broadcast bool `json:"broadcast,omitempty"`
}

// Sent is the answer of a send: the message's seq, durable.
type Sent struct {
	Seq uint64 `json:"seq"`
}

// EventPage is a page of history.
type EventPage struct {
	// Events in ascending seq, each the protobuf JSON of a lazarus.v1.Event
	// with proto field names.
	Events []json.RawMessage `json:"events"`
	// NextBefore pages backwards: pass it as "before"; 0 when this page
	// holds the first event of the view asked for (nothing is before it).
	NextBefore uint64 `json:"next_before"`
}

var eventJSON = protojson.MarshalOptions{UseProtoNames: true}

func statusName(s messages.ConversationStatus) string {
	switch s {
	case messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE:
		return "active"
	case messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED:
		return "suspended"
	case messages.ConversationStatus_CONVERSATION_STATUS_IDLE:
		return "idle"
	case messages.ConversationStatus_CONVERSATION_STATUS_ENDED:
		return "ended"
	}
	return "unspecified"
}

func timeOf(ts *timestamppb.Timestamp) *time.Time {
	if ts == nil {
		return nil
	}
	t := ts.AsTime().UTC()
	return &t
}

func conversationOf(row *messages.Conversation, md map[string]string) Conversation {
	if md == nil {
		md = map[string]string{}
	}
	return Conversation{ID: row.GetId(), Status: statusName(row.GetStatus()),
		Created: timeOf(row.GetCreated()), Updated: timeOf(row.GetUpdated()), Metadata: md}
}

// mayOwn reports whether c sees a conversation of metadata md.
func (c caller) mayOwn(md map[string]string) bool {
	return c.operator || (md[OwnerKey] != "" && md[OwnerKey] == c.UserID)
}

// conversation reads the conversation id for c: its row and metadata, or
// an error that does not tell a stranger whether it exists (404).
func (s *Server) conversation(ctx context.Context, c caller, id string) (*messages.Conversation, map[string]string, error) {
	if err := journal.ValidateID("conversation id", id); err != nil {
		return nil, nil, err
	}
	st := s.rt.Store()
	row, err := st.Conversation(ctx, id)
	switch {
	case errors.Is(err, journal.ErrDeleted), errors.Is(err, journal.ErrNotFound):
		if c.operator {
			return nil, nil, err
		}
		return nil, nil, errNotFound // a deleted conversation's owner went with it
	case err != nil:
		return nil, nil, err
	}
	md, err := st.Metadata(ctx, id)
	if err != nil {
		if !c.operator && (errors.Is(err, journal.ErrDeleted) || errors.Is(err, journal.ErrNotFound)) {
			return nil, nil, errNotFound
		}
		return nil, nil, err
	}
	if !c.mayOwn(md) {
		return nil, nil, errNotFound
	}
	return row, md, nil
}

// listScanFactor bounds the rows one listing reads (with a metadata
// filter, the ids of the Store's index, with a row or not): at most this
// many times the page size. As rows are filtered (by owner, unless the caller is
// an operator, and by the metadata asked for), a page may hold fewer
// conversations than asked (even none) with a next cursor.
const listScanFactor = 20

// metadataFilter reads the query parameters metadata[KEY]=VALUE (OpenAPI's
// deepObject style): a conversation is listed only if its metadata holds
// every KEY with its VALUE. An empty VALUE, which no stored metadata
// holds (an empty value deletes a key), is a bad request.
func metadataFilter(r *http.Request) (map[string]string, error) {
	q, err := query(r)
	if err != nil {
		return nil, err
	}
	var want map[string]string
	for name, values := range q {
		key, ok := strings.CutPrefix(name, "metadata[")
		if !ok {
			continue
		}
		key, ok = strings.CutSuffix(key, "]")
		if !ok || len(values) != 1 {
			return nil, errInvalid(fmt.Sprintf("query parameter %q: want one metadata[KEY]=VALUE", name))
		}
		if err := journal.ValidateID("metadata key", key); err != nil {
			return nil, err
		}
		if values[0] == "" {
			// It would match nothing: no stored value is empty.
			return nil, errInvalid(fmt.Sprintf("query parameter %q: empty value (a stored metadata value is never empty: an empty one deletes its key)", name))
		}
		if want == nil {
			want = map[string]string{}
		}
		want[key] = values[0]
	}
	return want, nil
}

// listFunc reads a page of the rows a listing looks at, up to limit, after
// cursor: the rows, the cursor of the next page ("" when there is none),
// and how many entries the Store read for them (counted against the
// listing's scan budget).
type listFunc func(ctx context.Context, cursor string, limit int) (rows []*messages.Conversation, next string, read int, err error)

// listRows is the listFunc of an unfiltered listing: the Store's rows.
func listRows(st journal.Store) listFunc {
	return func(ctx context.Context, cursor string, limit int) ([]*messages.Conversation, string, int, error) {
		rows, next, err := st.ListConversations(ctx, cursor, limit)
		return rows, next, len(rows), err
	}
}

// findRows lists, in place of ListConversations, the rows of the
// conversations holding one pair of want (the first key, in order) from
// the Store's metadata index, so that a filtered listing reads the
// conversations holding it, not every conversation; the other pairs are
// checked on each row. It reads one page of the index: an id without a
// row (metadata left without one, or deleted since it was found) is
// skipped but counted as read, so a page of such ids may hold no row
// with a next cursor, and the listing's scan budget bounds them too.
func findRows(st journal.Store, want map[string]string) listFunc {
	key := slices.Min(slices.Collect(maps.Keys(want)))
	return func(ctx context.Context, cursor string, limit int) ([]*messages.Conversation, string, int, error) {
		ids, next, err := st.FindConversations(ctx, key, want[key], cursor, limit)
		if err != nil {
			return nil, "", 0, err
		}
		var rows []*messages.Conversation
		for _, id := range ids {
			row, err := st.Conversation(ctx, id)
			switch {
			case errors.Is(err, journal.ErrDeleted) || errors.Is(err, journal.ErrNotFound):
				continue // deleted since it was found, or metadata without a row
			case err != nil:
				return nil, "", 0, err
			}
			rows = append(rows, row)
		}
		return rows, next, len(ids), nil
	}
}

func matches(md, want map[string]string) bool {
	for k, v := range want {
		if got, ok := md[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func (s *Server) listConversations(w http.ResponseWriter, r *http.Request, c caller) {
	cursor, limit, err := pageParams(r)
	if err == nil {
		cursor, err = s.cursors.open(cursor)
	}
	if err == nil && cursor != "" {
		err = journal.ValidateID("cursor", cursor)
	}
	var want map[string]string
	if err == nil {
		want, err = metadataFilter(r)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}

	ctx, st := r.Context(), s.rt.Store()
	list := listRows(st)
	if len(want) > 0 {
		list = findRows(st, want)
	}
	out := ConversationList{Conversations: []Conversation{}}
	budget := limit * listScanFactor
	for {
		rows, next, read, err := list(ctx, cursor, min(limit, budget))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		budget -= read
		if len(rows) == 0 && read > 0 {
			cursor = next // entries without a row: resume after them
		}
		for _, row := range rows {
			cursor = row.GetId()
			md, err := st.Metadata(ctx, row.GetId())
			if errors.Is(err, journal.ErrDeleted) || errors.Is(err, journal.ErrNotFound) {
				continue // deleted since it was listed
			}
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			if !c.mayOwn(md) || !matches(md, want) {
				continue
			}
			out.Conversations = append(out.Conversations, conversationOf(row, md))
			if len(out.Conversations) == limit {
				break
			}
		}
		// Every row read was looked at: the loop did not stop at a full
		// page before the end of rows.
		readAll := len(rows) == 0 || cursor == rows[len(rows)-1].GetId()
		switch {
		case (next == "" || read == 0) && (len(out.Conversations) < limit || readAll):
			// The last page, full or not: the Store has no row after
			// the last one read, so no cursor (a cursor would name an
			// empty page, and the same listing read from the Store
			// says there is no more).
			writeJSON(w, http.StatusOK, out)
			return
		case len(out.Conversations) == limit || budget <= 0:
			k := len(out.Conversations)
			own := k > 0 && out.Conversations[k-1].ID == cursor
			out.NextCursor = s.cursors.next(cursor, own) // sealed after a row c may not see
			writeJSON(w, http.StatusOK, out)
			return
		}
	}
}

func newConversationID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "c-" + hex.EncodeToString(b[:])
}

// createConversation makes a conversation with a fresh random id, its
// caller as owner. The metadata is written and then the row (status idle,
// no events): nobody else can know the id before the answer, so nothing
// races the two writes, and the conversation exists only once it has its
// owner. If the row is refused, the metadata is removed again.
func (s *Server) createConversation(w http.ResponseWriter, r *http.Request, c caller) {
	var body CreateConversation
	if err := s.decodeBody(w, r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	md, err := userMetadata(body.Metadata)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	md[OwnerKey] = c.UserID
	id := newConversationID()
	if err := journal.ValidateMetadata(id, md); err != nil {
		s.writeError(w, r, err)
		return
	}
	settings := body.Settings.agent()
	if err := agent.ValidateSettings(settings, nil); err != nil {
		s.writeError(w, r, err)
		return
	}
	ctx := r.Context()
	st := s.rt.Store()
	// The metadata, owner included, is written first: a Store keeps
	// metadata without a row, and no lookup, listing or search shows a
	// conversation that has no row. So the conversation never exists
	// without its owner, even if the process dies between the two writes
	// (what is left then is metadata nobody sees).
	if err := st.PutMetadata(ctx, id, md); err != nil {
		s.writeError(w, r, err)
		return
	}
	// Configure creates the conversation, idle, with its settings, through
	// the conversation's own actor (a tool choice is checked against the
	// Runtime's tools there: nothing is written if it names none).
	if err := s.rt.Configure(ctx, id, settings); err != nil {
		if errors.Is(err, journal.ErrInvalid) { // refused, nothing written
			s.dropMetadata(context.WithoutCancel(ctx), id, md)
		}
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/conversations/"+url.PathEscape(id))
	s.answerWritten(w, r, c, id, http.StatusCreated, Conversation{
		Status: statusName(messages.ConversationStatus_CONVERSATION_STATUS_IDLE), Metadata: md})
}

// dropMetadata removes the metadata of a conversation whose creation was
// refused after it was written (best effort: left behind, nobody sees it).
// Not after an error of unknown outcome: the row may have landed, and it
// must keep its owner.
func (s *Server) dropMetadata(ctx context.Context, id string, md map[string]string) {
	gone := make(map[string]string, len(md))
	for k := range md {
		gone[k] = ""
	}
	if err := s.rt.Store().PutMetadata(ctx, id, gone); err != nil {
		s.log.Warn("server: the metadata of a conversation whose creation failed could not be removed", "conversation", id, "err", err)
	}
}

func (s *Server) getConversation(w http.ResponseWriter, r *http.Request, c caller) {
	row, md, err := s.conversation(r.Context(), c, r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, conversationOf(row, md))
}

// deleteConversation deletes the conversation id for c. Records under an
// id without a row (metadata a creation left when it failed part-way,
// which no lookup, listing or search shows) are deleted too, as
// Runtime.Delete does, for an operator or the owner that metadata names;
// anyone else gets the 404 of any id.
func (s *Server) deleteConversation(w http.ResponseWriter, r *http.Request, c caller) {
	id := r.PathValue("id")
	_, _, err := s.conversation(r.Context(), c, id)
	if errors.Is(err, journal.ErrNotFound) || errors.Is(err, errNotFound) {
		err = s.strayRecords(r.Context(), c, id)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.rt.Delete(r.Context(), id); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// strayRecords checks, for an id that conversation found no row of c's
// under, whether c may delete what is stored under it without a row: an
// operator may (Runtime.Delete then says whether anything is stored),
// else only the owner the metadata names. Anything else is errNotFound.
func (s *Server) strayRecords(ctx context.Context, c caller, id string) error {
	md, err := s.rt.Store().Metadata(ctx, id)
	switch {
	case err != nil && !c.operator && (errors.Is(err, journal.ErrDeleted) || errors.Is(err, journal.ErrNotFound)):
		return errNotFound
	case err != nil:
		return err
	case !c.mayOwn(md):
		return errNotFound
	}
	return nil
}

func (s *Server) sendMessage(w http.ResponseWriter, r *http.Request, c caller) {
	id := r.PathValue("id")
	var body SendMessage
	if err := s.decodeBody(w, r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	if _, _, err := s.conversation(r.Context(), c, id); err != nil {
		s.writeError(w, r, err)
		return
	}
	to := body.Agent
	if to == defaultAgentParam {
		to = "" // no named agent has that name (lazarus.Agent.Name)
	}
	msg := &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: body.Text}}}}
	seq, err := s.rt.SendMessage(r.Context(), id, msg, lazarus.SendOptions{RequestID: body.RequestID, Agent: to, Broadcast: body.Broadcast}, c.scope())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, Sent{Seq: seq})
}

func (s *Server) history(w http.ResponseWriter, r *http.Request, c caller) {
	id := r.PathValue("id")
	before, err := uintParam(r, "before")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	_, limit, err := pageParams(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	view, err := s.agentParam(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	effective, err := viewParam(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if _, _, err := s.conversation(r.Context(), c, id); err != nil {
		s.writeError(w, r, err)
		return
	}
	// One entry more than the page says whether the view holds anything
	// before it (a view's first event need not be seq 1).
	evs, err := s.historyOf(r, id, before, limit+1, view, effective)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	page := EventPage{Events: make([]json.RawMessage, 0, min(limit, len(evs)))}
	full := len(evs) > limit
	if full {
		evs = evs[1:]
		page.NextBefore = evs[0].GetSeq()
	}
	// The newest events first, within Options.MaxPageBytes (at least one,
	// so paging always gets on); a page cut short resumes before the
	// oldest it holds.
	size := 0
	for i := len(evs) - 1; i >= 0; i-- {
		b, err := eventJSON.Marshal(evs[i])
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if len(page.Events) > 0 && size+len(b) > s.opts.MaxPageBytes {
			page.NextBefore = evs[i+1].GetSeq()
			break
		}
		size += len(b)
		page.Events = append(page.Events, b)
	}
	if !full && page.NextBefore == 0 && len(evs) > 0 && evs[0].GetSeq() > 1 && view == nil && !effective {
		// The full log's read stops at Options.MaxPageBytes (historyOf),
		// so it may hold fewer than limit+1 events with more before
		// them: one event before the oldest says whether there are.
		older, err := s.rt.HistoryWithin(r.Context(), id, evs[0].GetSeq(), 1, 1)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if len(older) > 0 {
			page.NextBefore = evs[0].GetSeq()
		}
	}
	slices.Reverse(page.Events)
	writeJSON(w, http.StatusOK, page)
}
