package server

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strings"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// RewindConversation is the body of POST /v1/conversations/{id}/rewind.
// New optional fields may be added; existing ones keep their meaning.
type RewindConversation struct {
	// ToSeq is the seq the head moves back to (lazarus Runtime.Rewind): the
	// model no longer sees the events after it, the log keeps them.
	// Required; 0 rewinds to the start.
	ToSeq *uint64 `json:"to_seq"`
	// Reason is recorded in the rewind event. Optional.
	Reason string `json:"reason,omitempty"`
}

// EditMessage is the body of POST /v1/conversations/{id}/edit.
type EditMessage struct {
	// Seq is the user message replaced (lazarus Runtime.Edit). Required,
	// at least 1.
	Seq uint64 `json:"seq"`
	// Text of the new message. Required, non-empty.
	Text string `json:"text"`
}

// ForkConversation is the body of POST /v1/conversations/{id}/fork.
type ForkConversation struct {
	// AtSeq is the last seq of the source's history the new conversation
	// gets (lazarus Runtime.Fork). Required, at least 1.
	AtSeq uint64 `json:"at_seq"`
	// Metadata to set on the new conversation over the source's (keys as
	// ids, not under ReservedMetadataPrefix). Optional.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// userMetadata checks the metadata a request body sets: no key under
// ReservedMetadataPrefix, no empty value. It returns a copy with room for
// the owner.
func userMetadata(in map[string]string) (map[string]string, error) {
	md := make(map[string]string, len(in)+1)
	for k, v := range in {
		if strings.HasPrefix(k, ReservedMetadataPrefix) {
			return nil, errInvalid(fmt.Sprintf("metadata key %q: keys under %q are reserved", k, ReservedMetadataPrefix))
		}
		if v == "" {
			return nil, errInvalid(fmt.Sprintf("metadata key %q has an empty value", k))
		}
		md[k] = v
	}
	return md, nil
}

// answerWritten answers status with the conversation id as GET shows it,
// read again after a write that landed. If that read fails (the Store
// failing right after the write), the answer is still status, with known,
// what the write made known (its id, metadata and the status it set, or
// "unspecified"; no times): an error would tell the client that nothing
// was written, or that it may not have been, and its retry would write
// again (a second fork, a second rewind). The read's failure is logged.
func (s *Server) answerWritten(w http.ResponseWriter, r *http.Request, c caller, id string, status int, known Conversation) {
	row, md, err := s.conversation(r.Context(), c, id)
	if err != nil {
		if !clientGone(r, err) {
			s.log.Warn("server: a conversation could not be read again after a write that landed; answered with what the write made known",
				"conversation", id, "err", err)
		}
		known.ID, known.Created, known.Updated = id, nil, nil
		if known.Metadata == nil {
			known.Metadata = map[string]string{}
		}
		writeJSON(w, status, known)
		return
	}
	writeJSON(w, status, conversationOf(row, md))
}

// statusUnspecified is the status of a conversation the server could not
// read (statusName's for a status it does not know).
const statusUnspecified = "unspecified"

// endConversation ends the conversation (Runtime.End). The body is empty
// or {}.
func (s *Server) endConversation(w http.ResponseWriter, r *http.Request, c caller) {
	id := r.PathValue("id")
	var body struct{}
	if err := s.decodeOptionalBody(w, r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	row, md, err := s.conversation(r.Context(), c, id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.rt.End(r.Context(), id); err != nil {
		s.writeError(w, r, err)
		return
	}
	known := conversationOf(row, md)
	known.Status = statusName(messages.ConversationStatus_CONVERSATION_STATUS_ENDED)
	s.answerWritten(w, r, c, id, http.StatusOK, known)
}

// rewindConversation moves the head back (Runtime.Rewind), the caller as
// the rewind's scope. Files are not restored.
func (s *Server) rewindConversation(w http.ResponseWriter, r *http.Request, c caller) {
	id := r.PathValue("id")
	var body RewindConversation
	if err := s.decodeBody(w, r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	if body.ToSeq == nil {
		s.writeError(w, r, errInvalid("to_seq is required"))
		return
	}
	row, md, err := s.conversation(r.Context(), c, id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.rt.Rewind(r.Context(), id, *body.ToSeq, lazarus.RewindOptions{Reason: body.Reason}, c.scope()); err != nil {
		s.writeError(w, r, err)
		return
	}
	known := conversationOf(row, md)
	known.Status = statusUnspecified
	s.answerWritten(w, r, c, id, http.StatusOK, known)
}

// editMessage replaces a user message (Runtime.Edit), the caller as the
// new message's author; a turn follows, as after a send.
func (s *Server) editMessage(w http.ResponseWriter, r *http.Request, c caller) {
	id := r.PathValue("id")
	var body EditMessage
	if err := s.decodeBody(w, r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	switch {
	case body.Seq == 0:
		s.writeError(w, r, errInvalid("seq is required (at least 1)"))
		return
	case body.Text == "":
		s.writeError(w, r, errInvalid("text is required"))
		return
	}
	if _, _, err := s.conversation(r.Context(), c, id); err != nil {
		s.writeError(w, r, err)
		return
	}
	seq, err := s.rt.Edit(r.Context(), id, body.Seq, body.Text, c.scope())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, Sent{Seq: seq})
}

// forkConversation copies the history up to at_seq into a new
// conversation (Runtime.ForkWith) with a fresh random id, owned by the
// caller: the fork gets the source's metadata with the body's and the
// caller as owner merged over it, in the fork's one write.
func (s *Server) forkConversation(w http.ResponseWriter, r *http.Request, c caller) {
	src := r.PathValue("id")
	var body ForkConversation
	if err := s.decodeBody(w, r, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	if body.AtSeq == 0 {
		s.writeError(w, r, errInvalid("at_seq is required (at least 1)"))
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
	ctx := r.Context()
	_, srcMD, err := s.conversation(ctx, c, src)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.rt.ForkWith(ctx, src, body.AtSeq, id, lazarus.ForkOptions{Metadata: md}); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/conversations/"+url.PathEscape(id))
	known := Conversation{Status: statusUnspecified, Metadata: make(map[string]string, len(srcMD)+len(md))}
	maps.Copy(known.Metadata, srcMD)
	maps.Copy(known.Metadata, md) // ForkOptions.Metadata is merged over the source's
	s.answerWritten(w, r, c, id, http.StatusCreated, known)
}
