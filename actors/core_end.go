package actors

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// queuedEnd is an EndConversation with its caller: one waiting for the
// write in flight before it is decided (core.ends), or one whose own write
// is in flight (pendingWrite.end).
type queuedEnd struct {
	sender any
	msg    proto.Message
}

// ended reports whether the conversation's row is ENDED: it takes no new
// message, rewind or turn.
func (c *core) ended() bool {
	return c.rowStatus == messages.ConversationStatus_CONVERSATION_STATUS_ENDED
}

// onEnd handles an EndConversation. While a write is in flight it waits
// for it (a turn's last write is in flight when SendAndWait returns: the
// turn's end is published at its commit, before this core hears of it),
// and is decided as if it arrived right after the write landed (see
// decideEnd).
func (c *core) onEnd(sender any, m *messages.EndConversation) {
	q := &queuedEnd{sender: sender, msg: m}
	if c.inflight != nil {
		c.ends = append(c.ends, q)
		return
	}
	c.decideEnd(q)
	c.advance()
}

// decideEnd decides an End with nothing in flight: at rest (no turn
// running or owed, no call open, nothing queued) it writes the row's
// status ENDED, in order with the core's other writes, and answers once
// the write lands; otherwise (a turn running or owed, a call open, or a
// send, rewind or configure that arrived while the End waited for a write
// in flight and is queued to be written) it refuses with
// journal.ErrInvalid, saying which, and writes nothing. Ending an ended
// conversation succeeds and writes nothing.
func (c *core) decideEnd(q *queuedEnd) {
	switch {
	case c.ended():
		c.reply(q.sender, q.msg, 0, nil)
	case c.modelBusy || c.answer != nil || c.failure != nil || c.retryArmed || len(c.order) > 0 || c.turnOwed():
		c.reply(q.sender, q.msg, 0, journal.Invalidf("conversation %q: end: a turn is in progress or a tool call is open; end it once the turn is over", c.cfg.ID))
	case len(c.sends) > 0 || len(c.rewinds) > 0 || len(c.configs) > 0:
		// Queued behind the write the End waited for, after the End.
		c.reply(q.sender, q.msg, 0, journal.Invalidf("conversation %q: end: a send, rewind or configure arrived while it waited and is not written yet; end it once it is", c.cfg.ID))
	default:
		req := &messages.AppendRequest{Status: messages.ConversationStatus_CONVERSATION_STATUS_ENDED}
		c.write(&pendingWrite{kind: writeEnd, req: req, end: q})
	}
}

// decideEnds decides the Ends that waited for the write that just landed,
// before anything else starts; the first to write ENDED makes the others
// succeed once it lands.
func (c *core) decideEnds() {
	for len(c.ends) > 0 && c.inflight == nil {
		q := c.ends[0]
		c.ends = c.ends[1:]
		c.decideEnd(q)
	}
}

// endedErr is the answer to a send, a rewind or a configure of an ended
// conversation.
func (c *core) endedErr() error {
	return fmt.Errorf("conversation %q: %w", c.cfg.ID, journal.ErrEnded)
}

// refuseQueuedAfterEnd answers the sends, rewinds and configures that
// arrived while the End's write was in flight: the conversation is ended
// now, so they are refused (a retry of a send already in the log gets its
// seq).
func (c *core) refuseQueuedAfterEnd() {
	for _, q := range c.sends {
		if !c.answerIfLogged(q) {
			c.reply(q.sender, q.msg, 0, c.endedErr())
		}
	}
	for _, q := range c.rewinds {
		c.reply(q.sender, q.msg, 0, c.endedErr())
	}
	for _, q := range c.configs {
		c.reply(q.sender, q.msg, 0, c.endedErr())
	}
	c.sends, c.rewinds, c.configs = nil, nil, nil
}
