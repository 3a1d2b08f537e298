package lazarus

import (
	"strings"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// MaxPlainEditText returns the longest text whose user message event,
// with a request id of 32 bytes (as newRequestID makes them) but no
// author, time or seq, fits journal.MaxEventBytes: a text that passes the
// Runtime's check of the bare event (Send, Edit, the gateway's), and that
// the event the conversation writes is too large for. Exported for the
// tests of package lazarus_test.
func MaxPlainEditText() int {
	lo, hi := 0, journal.MaxEventBytes
	for lo < hi {
		m := (lo + hi + 1) / 2
		msg := &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: strings.Repeat("e", m)}}}}
		ev := &messages.Event{RequestId: strings.Repeat("0", 32), Body: &messages.Event_UserMsg{UserMsg: msg}}
		if journal.ValidateEvent(ev) == nil {
			lo = m
		} else {
			hi = m - 1
		}
	}
	return lo
}
