package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// Call is a human tool call as the API shows it.
type Call struct {
	ID             string `json:"id"`
	ConversationID string `json:"conversation_id"`
	Tool           string `json:"tool"`
	// Status is "pending", "resolved", "errored" (rejected, cancelled or
	// failed) or "expired": the stored row's status.
	Status string `json:"status"`
	// Outcome says how the call ended, or "pending": one of the Call*
	// constants (CallAnswered, CallRejected, CallExpired, CallCancelled,
	// ...), derived from the stored status and the code of the call's
	// error result. It tells apart what Status calls "errored": a person
	// rejected it, a rewind (or edit) of its conversation cancelled it,
	// or it failed otherwise.
	Outcome string `json:"outcome"`
	// Prompt is what the human is asked.
	Prompt string `json:"prompt"`
	// Arguments is the call's JSON arguments object.
	Arguments json.RawMessage `json:"arguments"`
	// Created is when the model's answer holding the call was written.
	Created *time.Time `json:"created,omitempty"`
	// Deadline is when the call expires; absent for never.
	Deadline *time.Time `json:"deadline,omitempty"`
	// Resolved is when it was answered, expired or cancelled; absent
	// while pending.
	Resolved *time.Time `json:"resolved,omitempty"`
	// Requester is the identity whose turn made the call; Resolver, who
	// answered it (the system for an expiry).
	Requester *Identity `json:"requester,omitempty"`
	Resolver  *Identity `json:"resolver,omitempty"`
}

// Identity is a user id and roles, as recorded in the log.
type Identity struct {
	UserID string   `json:"user_id"`
	Roles  []string `json:"roles,omitempty"`
}

// CallList is a page of pending human calls.
type CallList struct {
	Calls []Call `json:"calls"`
	// NextCursor resumes the listing; "" when there is no more.
	NextCursor string `json:"next_cursor"`
}

// Resolve is the body of POST /v1/calls/{id}/resolve.
type Resolve struct {
	// Result is the answer: any JSON value but null, of at most
	// agent.MaxResultBytes. Required (null is read as none).
	Result json.RawMessage `json:"result"`
}

// Reject is the body of POST /v1/calls/{id}/reject.
type Reject struct {
	// Reason tells the model why the call was declined. Required,
	// non-empty, at most agent.MaxResultBytes.
	Reason string `json:"reason"`
}

// Answered is the answer of a resolve or reject: the call's id, durable.
type Answered struct {
	ID string `json:"id"`
	// Status is the call's stored status now: "resolved" (resolve) or
	// "errored" (reject), as Call.Status.
	Status string `json:"status"`
	// Outcome is how the call ended, as Call.Outcome: CallAnswered
	// (resolve) or CallRejected (reject), which Status alone ("errored")
	// does not tell from a cancellation or a failure.
	Outcome string `json:"outcome"`
}

func identityOf(p *messages.Identity) *Identity {
	if p == nil {
		return nil
	}
	return &Identity{UserID: p.GetUserId(), Roles: p.GetRoles()}
}

// Outcomes of a human call (Call.Outcome). They are stable: clients branch
// on them. A stored status or code this server does not know is
// CallUnknown, never an error.
const (
	// CallPending: not answered yet (status "pending").
	CallPending = "pending"
	// CallAnswered: a person answered it with a result (POST resolve,
	// Runtime.Resolve; status "resolved").
	CallAnswered = "answered"
	// CallRejected: a person declined it (POST reject, Runtime.Reject;
	// status "errored", error code agent.CodeRejected).
	CallRejected = "rejected"
	// CallExpired: its deadline passed before an answer (status
	// "expired"); the resolver is the system identity.
	CallExpired = "expired"
	// CallCancelled: a rewind or an edit of its conversation took it back
	// while it was open (status "errored", error code agent.CodeCanceled);
	// no one answered it, and it has no resolver.
	CallCancelled = "cancelled"
	// CallErrored: it ended with an error of another code (status
	// "errored").
	CallErrored = "errored"
	// CallUnknown: a stored status this server does not know (none, or one
	// written by a newer version).
	CallUnknown = "unknown"
)

// callOutcomes lists every value of Call.Outcome, in the order the OpenAPI
// document gives them.
var callOutcomes = []string{CallPending, CallAnswered, CallRejected, CallExpired, CallCancelled, CallErrored, CallUnknown}

// callOutcome returns how the call of row ended (Call.Outcome).
func callOutcome(row *messages.ToolCallRecord) string {
	switch row.GetStatus() {
	case messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING:
		return CallPending
	case messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED:
		return CallAnswered
	case messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED:
		return CallExpired
	case messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED:
		switch row.GetResult().GetError().GetCode() {
		case agent.CodeRejected:
			return CallRejected
		case agent.CodeCanceled:
			return CallCancelled
		}
		return CallErrored
	}
	return CallUnknown
}

func callStatus(s messages.ToolCallStatus) string {
	switch s {
	case messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING:
		return "pending"
	case messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED:
		return "resolved"
	case messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED:
		return "errored"
	case messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED:
		return "expired"
	}
	return "unspecified"
}

func callOf(row *messages.ToolCallRecord) Call {
	args := json.RawMessage(row.GetArgs())
	if !json.Valid(args) {
		args = json.RawMessage("null")
	}
	return Call{ID: row.GetId(), ConversationID: row.GetConversationId(), Tool: row.GetName(),
		Status: callStatus(row.GetStatus()), Outcome: callOutcome(row), Prompt: row.GetPrompt(), Arguments: args,
		Created: timeOf(row.GetCreated()), Deadline: timeOf(row.GetDeadline()), Resolved: timeOf(row.GetResolved()),
		Requester: identityOf(row.GetRequester()), Resolver: identityOf(row.GetResolver())}
}

// maySeeCall reports whether c sees the human call row: an operator, the
// owner of its conversation, or a user the call's tool's Authorizer
// accepts as a resolver (see the package documentation).
func (s *Server) maySeeCall(ctx context.Context, c caller, row *messages.ToolCallRecord) (bool, error) {
	if c.operator {
		return true, nil
	}
	if t, ok := s.rt.Tool(row.GetName()); ok && t.Authorizer != nil {
		err := t.Authorize(ctx, agent.Authorization{
			ConversationID: row.GetConversationId(), ToolCallID: row.GetId(), Tool: row.GetName(),
			Arguments: row.GetArgs(), Prompt: row.GetPrompt(), Requester: agent.IdentityOf(row.GetRequester()),
			Resolver: c.scope(),
		})
		if err == nil {
			return true, nil
		}
	}
	md, err := s.rt.Store().Metadata(ctx, row.GetConversationId())
	switch {
	case errors.Is(err, journal.ErrDeleted), errors.Is(err, journal.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return c.mayOwn(md), nil
}

// call reads the human call id for c, or an error that does not tell a
// stranger whether it exists (404).
func (s *Server) call(ctx context.Context, c caller, id string) (*messages.ToolCallRecord, error) {
	if err := journal.ValidateID("tool call id", id); err != nil {
		return nil, err
	}
	row, err := s.rt.Store().ToolCall(ctx, id)
	switch {
	case errors.Is(err, journal.ErrNotFound), errors.Is(err, journal.ErrDeleted):
		return nil, errNotFound
	case err != nil:
		return nil, err
	case row.GetExecutor() != messages.Executor_EXECUTOR_HUMAN:
		if c.operator {
			return nil, errInvalid("tool call " + id + " is not a human call")
		}
		return nil, errNotFound
	}
	ok, err := s.maySeeCall(ctx, c, row)
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return nil, errNotFound
	}
	return row, nil
}

// listScanCalls bounds the pending calls one listing reads for a caller
// who is not an operator, as a multiple of the page size.
const listScanCalls = 20

func (s *Server) listCalls(w http.ResponseWriter, r *http.Request, c caller) {
	cursor, limit, err := pageParams(r)
	if err == nil {
		cursor, err = s.cursors.open(cursor)
	}
	if err == nil && cursor != "" {
		_, _, err = journal.ParsePendingCursor(cursor)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ctx := r.Context()
	out := CallList{Calls: []Call{}}
	budget := limit * listScanCalls
	for {
		rows, next, err := s.rt.PendingCalls(ctx, cursor, min(limit, budget))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		budget -= len(rows)
		for _, row := range rows {
			cursor = journal.PendingCursor(row.GetConversationId(), row.GetId())
			ok, err := s.maySeeCall(ctx, c, row)
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			if !ok {
				continue
			}
			out.Calls = append(out.Calls, callOf(row))
			if len(out.Calls) == limit {
				break
			}
		}
		// Every row read was looked at: the loop did not stop at a full
		// page before the end of rows.
		last := len(rows) - 1
		readAll := last < 0 || cursor == journal.PendingCursor(rows[last].GetConversationId(), rows[last].GetId())
		switch {
		case (next == "" || len(rows) == 0) && (len(out.Calls) < limit || readAll):
			// The last page, full or not: no cursor.
			writeJSON(w, http.StatusOK, out)
			return
		case len(out.Calls) == limit || budget <= 0:
			k := len(out.Calls)
			own := k > 0 && journal.PendingCursor(out.Calls[k-1].ConversationID, out.Calls[k-1].ID) == cursor
			out.NextCursor = s.cursors.next(cursor, own) // sealed after a call c may not see
			writeJSON(w, http.StatusOK, out)
			return
		}
	}
}

func (s *Server) getCall(w http.ResponseWriter, r *http.Request, c caller) {
	row, err := s.call(r.Context(), c, r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, callOf(row))
}

func (s *Server) resolveCall(w http.ResponseWriter, r *http.Request, c caller) {
	var body Resolve
	if err := s.decodeBody(w, r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	if len(body.Result) == 0 || string(body.Result) == "null" {
		s.writeError(w, r, errInvalid("result is required: any JSON value but null"))
		return
	}
	s.answer(w, r, c, func(ctx context.Context, id string) error {
		return s.rt.Resolve(ctx, id, string(body.Result), c.scope())
	}, Answered{Status: "resolved", Outcome: CallAnswered})
}

func (s *Server) rejectCall(w http.ResponseWriter, r *http.Request, c caller) {
	var body Reject
	if err := s.decodeBody(w, r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	switch {
	case body.Reason == "":
		s.writeError(w, r, errInvalid("reason is required"))
		return
	case len(body.Reason) > agent.MaxResultBytes:
		s.writeError(w, r, errInvalid("reason exceeds the size of a result"))
		return
	}
	s.answer(w, r, c, func(ctx context.Context, id string) error {
		return s.rt.Reject(ctx, id, body.Reason, c.scope())
	}, Answered{Status: "errored", Outcome: CallRejected})
}

// answer checks that c sees the call, then answers it with do, and writes
// done with the call's id. A call already answered is 409 stale (the
// caller sees it, so saying so leaks nothing); one the tool's rules
// refuse to c is 403.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, c caller, do func(context.Context, string) error, done Answered) {
	id := r.PathValue("id")
	if _, err := s.call(r.Context(), c, id); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := do(r.Context(), id); err != nil {
		s.writeError(w, r, err)
		return
	}
	done.ID = id
	writeJSON(w, http.StatusOK, done)
}
