package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/journal"
)

// TurnEndData is the data of a "turn_end" message of an event stream.
type TurnEndData struct {
	// Outcome is "answered", "suspended", "failed" or "cancelled".
	Outcome string `json:"outcome"`
	// Seq is the seq of the event that ended the turn: the answer, the
	// suspension, the turn_failed event or the rewind that took the turn
	// back (0 for a failure that was never written and for a kill, which no
	// event records).
	Seq uint64 `json:"seq,omitempty"`
	// Error says why the turn failed or was cancelled.
	Error string `json:"error,omitempty"`
}

// RetryData is the data of a "retry" message of an event stream: a model
// call failed and is tried again; nothing of it was written, and the
// deltas that follow are the new attempt's, from its start.
type RetryData struct {
	// Attempt is the attempt that failed, counted from 1.
	Attempt int `json:"attempt"`
	// DelayMS is the wait before the next attempt, in milliseconds.
	DelayMS int64 `json:"delay_ms"`
	// Error says why the attempt failed.
	Error string `json:"error,omitempty"`
}

// DeltaData is the data of a "delta" message of an event stream.
type DeltaData struct {
	Text string `json:"text"`
}

func outcomeName(o lazarus.TurnOutcome) string {
	switch o {
	case lazarus.TurnAnswered:
		return "answered"
	case lazarus.TurnSuspended:
		return "suspended"
	case lazarus.TurnFailed:
		return "failed"
	case lazarus.TurnCancelled:
		return "cancelled"
	}
	return "unspecified"
}

// stream serves the conversation's updates as server-sent events (see the
// package documentation). It runs on the request's goroutine until the
// client goes away, the subscription ends (lagged, deleted, the Runtime
// closed) or a write fails.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, c caller) {
	id := r.PathValue("id")
	// Last-Event-ID overrides "after": when the header is given, the
	// parameter is not read (a reconnecting client resends its URL, which
	// need not hold a valid one).
	// A header given more than once is refused whatever its values (an
	// empty first one would otherwise hide the second).
	var after uint64
	var err error
	if len(r.Header.Values("Last-Event-ID")) > 1 {
		s.writeError(w, r, errInvalid("Last-Event-ID is given more than once"))
		return
	}
	if v := strings.TrimSpace(r.Header.Get("Last-Event-ID")); v != "" {
		after, err = strconv.ParseUint(v, 10, 64)
		if err != nil {
			s.writeError(w, r, errInvalid("Last-Event-ID must be the seq of an event"))
			return
		}
	} else if after, err = uintParam(r, "after"); err != nil {
		s.writeError(w, r, err)
		return
	}
	view, err := s.agentParam(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if _, _, err := s.conversation(r.Context(), c, id); err != nil {
		s.writeError(w, r, err)
		return
	}
	// A client's cursor is the seq of an event it was sent, durable
	// before: one past the log's end is no cursor of this conversation's
	// (the stream would drop every event until the log passed it).
	last, err := s.rt.Store().LastSeq(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if after > last {
		s.writeError(w, r, errInvalid(fmt.Sprintf("the stream cannot start after seq %d: the log ends at seq %d", after, last)))
		return
	}
	if r.Method == http.MethodHead {
		// (ServeMux routes HEAD to the GET handler.) A HEAD has no body:
		// a stream would send nothing, and never end. It gets the status
		// a GET would (429 when the conversation's subscriptions are at
		// lazarus.Options.MaxSubscriptions, 503 closed): a subscription is
		// taken and let go at once, its slot free again (its channel
		// closed) before the answer. In a cluster the owner's refusal
		// of a GET comes in its body, after the 200: the HEAD does not
		// wait for the owner either.
		ctx, cancel := context.WithCancel(r.Context())
		updates, err := s.rt.SubscribeWith(ctx, id, after, lazarus.SubscribeOptions{Agent: view})
		cancel()
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		for range updates {
		}
		setStreamHeaders(w.Header())
		w.WriteHeader(http.StatusOK)
		return
	}
	updates, err := s.rt.SubscribeWith(r.Context(), id, after, lazarus.SubscribeOptions{Agent: view})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	rc := http.NewResponseController(w)
	// A stream outlives the server's WriteTimeout; each of its writes (an
	// update's messages, a flush, a keep-alive) is bounded instead, so
	// that a client that stops reading does not hold the handler and its
	// subscription for as long as its connection.
	bound := func() { _ = rc.SetWriteDeadline(time.Now().Add(s.opts.StreamWriteTimeout)) }
	bound()
	setStreamHeaders(w.Header())
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}
	// closing tells the client that the server ended its stream, when the
	// request's context was cancelled with a cause wrapping
	// lazarus.ErrClosed (a server shutting down), not by the client.
	closing := func() {
		if cause := context.Cause(r.Context()); errors.Is(cause, lazarus.ErrClosed) {
			bound()
			_ = s.writeEnd(w, "", fmt.Errorf("server: event stream: %w", cause))
			_ = rc.Flush()
		}
	}
	keepAlive := time.NewTicker(s.opts.KeepAlive)
	defer keepAlive.Stop()
	// write writes one update; false ends the stream (flushed, when it
	// ended with an error message).
	write := func(u lazarus.Update, ok bool) bool {
		bound()
		if !ok {
			// The subscription ended without an error update: the request
			// is over, or the Runtime closed, which the client is told.
			if r.Context().Err() == nil {
				_ = s.writeEnd(w, "", fmt.Errorf("server: event stream: %w", lazarus.ErrClosed))
				_ = rc.Flush()
			} else {
				closing()
			}
			return false
		}
		switch err := s.writeUpdate(w, u); {
		case errors.Is(err, errStreamEnded):
			_ = rc.Flush()
			return false
		case err != nil:
			return false
		}
		return true
	}
	for {
		select {
		case u, ok := <-updates:
			if !write(u, ok) {
				return
			}
			// Write what else is ready before flushing.
			for more := true; more; {
				select {
				case u, ok := <-updates:
					if !write(u, ok) {
						return
					}
				default:
					more = false
				}
			}
			bound()
			if rc.Flush() != nil {
				return
			}
		case <-keepAlive.C:
			bound()
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		case <-r.Context().Done():
			closing()
			return
		}
	}
}

// setStreamHeaders sets the headers of an event stream's answer.
func setStreamHeaders(h http.Header) {
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
}

// writeUpdate writes one update as its messages.
func (s *Server) writeUpdate(w http.ResponseWriter, u lazarus.Update) error {
	if u.Event != nil {
		b, err := eventJSON.Marshal(u.Event)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "id: %d\nevent: event\ndata: %s\n\n", u.Event.GetSeq(), b); err != nil {
			return err
		}
	}
	if u.Delta != "" && u.Event == nil {
		if err := writeSSE(w, "delta", DeltaData{Text: u.Delta}); err != nil {
			return err
		}
	}
	if u.Restart {
		if err := writeSSE(w, "restart", struct{}{}); err != nil {
			return err
		}
	}
	if u.Retry != nil {
		d := RetryData{Attempt: u.Retry.Attempt, DelayMS: u.Retry.Delay.Milliseconds()}
		if u.Err != nil {
			d.Error = u.Err.Error()
		}
		return writeSSE(w, "retry", d)
	}
	if end := u.TurnEnd; end != nil {
		d := TurnEndData{Outcome: outcomeName(end.Outcome), Seq: end.Seq}
		if end.Err != nil {
			d.Error = end.Err.Error()
		}
		if err := writeSSE(w, "turn_end", d); err != nil {
			return err
		}
	}
	if u.Err != nil && u.TurnEnd == nil && !errors.Is(u.Err, journal.ErrConflict) {
		// (A lost write race is no end: the turn goes on.)
		return s.writeEnd(w, u.ConversationID, u.Err)
	}
	return nil
}

// errStreamEnded is writeUpdate's answer once it wrote the error message
// that ends a stream.
var errStreamEnded = errors.New("server: event stream ended")

// writeEnd writes the error message that ends a stream, and answers
// errStreamEnded if it was written.
func (s *Server) writeEnd(w http.ResponseWriter, conv string, cause error) error {
	status, code := classify(cause)
	if errors.Is(cause, lazarus.ErrLagged) {
		code = CodeLagged
	}
	if status >= 500 && code != CodeClosed && code != CodeLagged {
		// A slow client's lagged end is the client's doing, not a failure.
		s.log.Warn("server: event stream ended", "conversation", conv, "err", cause)
	}
	if err := writeSSE(w, "error", errorBody{Error: errorDetail{Code: code, Message: publicMessage(status, code, cause)}}); err != nil {
		return err
	}
	return errStreamEnded
}

func writeSSE(w http.ResponseWriter, event string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
	return err
}
