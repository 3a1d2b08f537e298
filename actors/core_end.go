package actors

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// queuedEnd is an EndConversation whose write is in flight, with its
// caller.
type queuedEnd struct {
	sender any
	msg    proto.Message
}

// ended reports whether the conversation's row is ENDED: it takes no new
// message, rewind or turn.
func (c *core) ended() bool {
	return c.rowStatus == messages.ConversationStatus_CONVERSATION_STATUS_ENDED
}

// onEnd handles an EndConversation: at rest (no turn running or owed, no
// call open, nothing queued or in flight) it writes the row's status
// ENDED, in order with the core's other writes, and answers once the write
// lands; otherwise it refuses with journal.ErrInvalid and writes nothing.
// Ending an ended conversation succeeds and writes nothing.
func (c *core) onEnd(sender any, m *messages.EndConversation) {
	switch {
	case c.ended():
		c.reply(sender, m, 0, nil)
	case c.inflight != nil || c.modelBusy || c.answer != nil || c.failure != nil || c.retryArmed ||
		len(c.order) > 0 || len(c.sends) > 0 || len(c.rewinds) > 0 || len(c.configs) > 0 || c.turnOwed():
		c.reply(sender, m, 0, journal.Invalidf("conversation %q: end: a turn is in progress or a tool call is open; end it once the turn is over", c.cfg.ID))
	default:
		req := &messages.AppendRequest{Status: messages.ConversationStatus_CONVERSATION_STATUS_ENDED}
		c.write(&pendingWrite{kind: writeEnd, req: req, end: &queuedEnd{sender: sender, msg: m}})
	}
	c.advance()
}

// endedErr is the answer to a send or a rewind of an ended conversation.
func (c *core) endedErr() error {
	return fmt.Errorf("conversation %q: %w", c.cfg.ID, journal.ErrEnded)
}
