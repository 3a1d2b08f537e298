package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// Summarizer folds events into a summary: an LLM call in production,
// Deterministic in tests and the demo. Implementations must be safe for
// concurrent use.
type Summarizer interface {
	// Summarize folds prev (may be nil) and events (ascending, the rendered
	// span to cover, after prev.ToSeq) into a new summary covering
	// prev.FromSeq (or the first event's seq) .. the last event's seq, with
	// its Version set. Called off the actor's goroutine; it must honour
	// ctx. It must not modify prev or events; it may return prev itself
	// (nothing to add). Plan.Run calls it and then sets the span the
	// summary really covers, on a copy of what it returned. The runtime recovers a
	// panic of Summarize into an error wrapping agent.ErrPanicked, and
	// skips that summary.
	Summarize(ctx context.Context, conversationID string, prev *messages.Summary, events []*messages.Event) (*messages.Summary, error)
}

// DeterministicVersion is the Version of Deterministic's summaries.
const DeterministicVersion = "deterministic/1"

// DefaultDeterministicMaxBytes is Deterministic's MaxBytes when zero.
const DefaultDeterministicMaxBytes = 4096

// Deterministic is a Summarizer for tests and the demo; it calls no model.
// Its content is a header line
//
//	deterministic summary of seq <from>..<to>, sha256 <16 hex digits>
//
// followed by one line per folded event, oldest first: the body of prev's
// content (without its header, when prev is a Deterministic summary; all of
// it otherwise), then one line per event:
//
//	[3] user: <text>
//	[4] assistant: <text> [call <name> <arguments>]...
//	[6] tool <name>: <content>            or  tool <name> error (<code>): <message>
//	[7] handoff from <agent>: <message>   (the default agent is "default")
//	[8] call <name> <arguments>           (a tool_call event)
//	[9] rewind to <seq>
//	[10] turn failed (<code>)
//	[11] suspension                       (or resolution)
//
// with newlines in texts, names and codes replaced by spaces, so every
// event is one line (a body this version does not know gives "[n]
// unknown"). The digest is of the full body, so it changes with any folded
// event even when the body is cut. When the content would exceed
// MaxBytes, the oldest lines are dropped (the body then starts with "...").
// The same inputs always give the same content. Created is left unset.
type Deterministic struct {
	// MaxBytes bounds the content (the header line is always kept). 0
	// means DefaultDeterministicMaxBytes; < 0 means no bound.
	MaxBytes int
}

var _ Summarizer = Deterministic{}

// Summarize implements Summarizer. It returns an error wrapping
// journal.ErrInvalid when events is empty, holds a nil event, or is not
// strictly ascending after prev.ToSeq; and ctx.Err() when ctx is done.
func (d Deterministic) Summarize(ctx context.Context, conversationID string, prev *messages.Summary, events []*messages.Event) (*messages.Summary, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(events) == 0 {
		return nil, journal.Invalidf("snapshot: nothing to summarize for %q", conversationID)
	}
	after := prev.GetToSeq()
	for i, ev := range events {
		if ev == nil {
			return nil, journal.Invalidf("snapshot: event %d of the span of %q is nil", i, conversationID)
		}
		if ev.GetSeq() <= after {
			return nil, journal.Invalidf("snapshot: event %d of the span of %q has seq %d, not after %d", i, conversationID, ev.GetSeq(), after)
		}
		after = ev.GetSeq()
	}
	from := events[0].GetSeq()
	if prev != nil {
		from = prev.GetFromSeq()
	}
	to := events[len(events)-1].GetSeq()

	// The header's length is known before its digest: the room left for
	// the body, and so how much of its end to keep, is known up front.
	var hdr [96]byte // 29 + 20 + 2 + 20 + 9 bytes of prefix, then the digest
	head := appendHeader(hdr[:0], from, to)
	limit := d.MaxBytes
	if limit == 0 {
		limit = DefaultDeterministicMaxBytes
	}
	room := limit - len(head) - digestLen - 1
	keep := -1 // all of it
	if limit > 0 {
		// cutFront reads the byte before the room-4 bytes it keeps.
		keep = max(room+1, 0)
	}

	// The body streams through the hash; only the end that may fit stays.
	b := getBody(keep)
	defer putBody(b)
	if prev != nil {
		pb := prev.GetContent()
		if prev.GetVersion() == DeterministicVersion {
			if _, rest, ok := strings.Cut(pb, "\n"); ok {
				pb = rest
			} else {
				pb = ""
			}
		}
		if pb != "" {
			b.raw(pb)
			b.lines = true
		}
	}
	for _, ev := range events {
		b.event(ev)
	}
	b.flush()
	digest := b.digest()

	tail, total := b.buf, b.dropped+len(b.buf)
	cut, marked := false, false
	if limit > 0 && total > room {
		cut = true
		tail, marked = cutFront(tail, room)
	}
	size := len(head) + digestLen
	switch {
	case marked:
		size += len("\n"+cutMark) + len(tail)
	case !cut && len(tail) > 0:
		size += 1 + len(tail)
	}
	var c strings.Builder
	c.Grow(size)
	c.Write(head)
	c.Write(digest)
	switch {
	case marked:
		c.WriteString("\n" + cutMark)
		c.Write(tail)
	case !cut && len(tail) > 0:
		c.WriteByte('\n')
		c.Write(tail)
	}
	return &messages.Summary{FromSeq: from, ToSeq: to, Content: c.String(), Version: DeterministicVersion}, nil
}

// digestLen is the length of the digest in a Deterministic header.
const digestLen = 16

// appendHeader appends the header line of a Deterministic summary of
// from..to up to its digest.
func appendHeader(b []byte, from, to uint64) []byte {
	b = append(b, "deterministic summary of seq "...)
	b = strconv.AppendUint(b, from, 10)
	b = append(b, ".."...)
	b = strconv.AppendUint(b, to, 10)
	return append(b, ", sha256 "...)
}

// cutMark starts a body whose oldest lines were dropped.
const cutMark = "...\n"

// cutFront cuts the end of a body to at most room bytes with cutMark:
// whole lines after the mark when it can, else a rune-aligned tail. end is
// the body's end: at least its last room+1 bytes. It returns what follows
// the mark, and false when not even the mark fits (the body is dropped).
func cutFront(end []byte, room int) ([]byte, bool) {
	if room <= len(cutMark) {
		return nil, false
	}
	start := len(end) - (room - len(cutMark))
	if end[start-1] != '\n' {
		if i := bytes.IndexByte(end[start:], '\n'); i >= 0 {
			start += i + 1 // drop the partial line
		} else {
			for start < len(end) && !utf8.RuneStart(end[start]) {
				start++
			}
		}
	}
	return end[start:], true
}

// hashChunk is how many bytes of a body Summarize buffers before hashing
// them.
const hashChunk = 16 << 10

// maxPooledBody bounds the buffers kept for reuse: an unbounded summary
// (MaxBytes < 0) keeps its whole body, which is not worth keeping after.
const maxPooledBody = 256 << 10

var bodies = sync.Pool{New: func() any { return &body{h: sha256.New()} }}

// body is the body of a Deterministic summary as Summarize writes it: the
// whole of it goes through the hash, and only its last keep bytes (all of
// it when keep < 0) stay in buf.
type body struct {
	h       hash.Hash
	buf     []byte // the end of the body; buf[:hashed] is hashed
	hashed  int
	keep    int
	dropped int  // bytes of the body before buf
	lines   bool // something was written: the next line starts with '\n'
	sum     [sha256.Size]byte
	hex     [16]byte
}

func getBody(keep int) *body {
	b := bodies.Get().(*body)
	b.h.Reset()
	b.buf, b.hashed, b.keep, b.dropped, b.lines = b.buf[:0], 0, keep, 0, false
	if want := keep + hashChunk + 64; keep >= 0 && cap(b.buf) < want {
		b.buf = make([]byte, 0, want)
	}
	return b
}

func putBody(b *body) {
	if cap(b.buf) > maxPooledBody {
		b.buf = nil
	}
	bodies.Put(b)
}

// flush hashes what buf holds that is not hashed yet, then drops all but
// its last keep bytes.
func (b *body) flush() {
	b.h.Write(b.buf[b.hashed:])
	if b.keep >= 0 && len(b.buf) > b.keep {
		d := len(b.buf) - b.keep
		b.buf = b.buf[:copy(b.buf, b.buf[d:])]
		b.dropped += d
	}
	b.hashed = len(b.buf)
}

// digest returns the first 8 bytes of the hash of everything flushed, in
// hex. The slice is b's.
func (b *body) digest() []byte {
	sum := b.h.Sum(b.sum[:0])
	hex.Encode(b.hex[:], sum[:8])
	return b.hex[:]
}

// write appends s, with its newlines replaced by spaces when flat, hashing
// as it goes so that buf never holds more than keep+hashChunk bytes of it.
func (b *body) write(s string, flat bool) {
	for len(s) > 0 {
		free := b.hashed + hashChunk - len(b.buf)
		if free <= 0 {
			b.flush()
			continue
		}
		piece := s[:min(free, len(s))]
		s = s[len(piece):]
		start := len(b.buf)
		b.buf = append(b.buf, piece...)
		if !flat {
			continue
		}
		for rest := b.buf[start:]; ; {
			i := bytes.IndexByte(rest, '\n')
			if i < 0 {
				break
			}
			rest[i] = ' '
			rest = rest[i+1:]
		}
	}
}

func (b *body) raw(s string)  { b.write(s, false) }
func (b *body) flat(s string) { b.write(s, true) }

func (b *body) uint(v uint64) {
	var n [20]byte
	b.write(string(strconv.AppendUint(n[:0], v, 10)), false)
}

// parts writes content parts as text: images as "<image>", files as
// "<file>", newlines as spaces.
func (b *body) parts(ps []*messages.ContentPart) {
	for _, p := range ps {
		switch {
		case p.GetImage() != nil:
			b.raw("<image>")
		case p.GetFile() != nil:
			b.raw("<file>")
		default:
			b.flat(p.GetText())
		}
	}
}

// event writes the line of ev (see Deterministic), after a newline unless
// it is the first line.
func (b *body) event(ev *messages.Event) {
	if b.lines {
		b.raw("\n")
	}
	b.lines = true
	b.raw("[")
	b.uint(ev.GetSeq())
	b.raw("] ")
	switch body := ev.GetBody().(type) {
	case *messages.Event_UserMsg:
		b.raw("user: ")
		b.parts(body.UserMsg.GetContent())
	case *messages.Event_AssistantMsg:
		b.raw("assistant: ")
		b.parts(body.AssistantMsg.GetContent())
		for _, c := range body.AssistantMsg.GetToolCalls() {
			b.raw(" [call ")
			b.flat(c.GetName())
			b.raw(" ")
			b.flat(c.GetArguments())
			b.raw("]")
		}
	case *messages.Event_ToolResult:
		tr := body.ToolResult
		b.raw("tool ")
		b.flat(tr.GetName())
		if e := tr.GetOutcome().GetError(); e != nil {
			b.raw(" error (")
			b.flat(e.GetCode())
			b.raw("): ")
			b.flat(e.GetMessage())
		} else {
			b.raw(": ")
			b.flat(tr.GetOutcome().GetContent())
		}
	case *messages.Event_ToolCall:
		c := body.ToolCall.GetCall()
		b.raw("call ")
		b.flat(c.GetName())
		b.raw(" ")
		b.flat(c.GetArguments())
	case *messages.Event_Suspension:
		b.raw("suspension")
	case *messages.Event_Resolution:
		b.raw("resolution")
	case *messages.Event_Rewind:
		b.raw("rewind to ")
		b.uint(body.Rewind.GetToSeq())
	case *messages.Event_TurnFailed:
		b.raw("turn failed (")
		b.flat(body.TurnFailed.GetCode())
		b.raw(")")
	case *messages.Event_Handoff:
		h := body.Handoff
		b.raw("handoff from ")
		if h.GetFrom() == "" {
			b.raw("default")
		} else {
			b.flat(h.GetFrom())
		}
		b.raw(": ")
		b.flat(h.GetMessage())
	default:
		b.raw("unknown")
	}
}
