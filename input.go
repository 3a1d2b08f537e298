package lazarus

import (
	"fmt"
	"unicode/utf8"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// checkUserMessage refuses a user message that says nothing: no parts, a
// nil part, a part with no content set, an empty text, or a blob with
// neither data nor a URI. The error wraps journal.ErrInvalid.
func checkUserMessage(msg *messages.UserMessage) error {
	parts := msg.GetContent()
	if len(parts) == 0 {
		return journal.Invalidf("empty message")
	}
	for i, p := range parts {
		switch part := p.GetPart().(type) {
		case *messages.ContentPart_Text:
			if part.Text == "" {
				return journal.Invalidf("part %d of the message is an empty text", i)
			}
		case *messages.ContentPart_Image:
			if err := checkBlob(i, "image", part.Image); err != nil {
				return err
			}
		case *messages.ContentPart_File:
			if err := checkBlob(i, "file", part.File); err != nil {
				return err
			}
		default:
			return journal.Invalidf("part %d of the message has no content", i)
		}
	}
	return nil
}

func checkBlob(i int, kind string, b *messages.Blob) error {
	if len(b.GetData()) == 0 && b.GetUri() == "" {
		return journal.Invalidf("part %d of the message (%s) has neither data nor a URI", i, kind)
	}
	return nil
}

// clipID returns an id (of a conversation, a tool call, a schedule, a
// metadata key), or another string a caller passed (a cron expression, a
// time zone, a parser's error repeating one), as an error message may
// quote it: whole when it is within journal.MaxIDBytes, as every valid id
// is; otherwise its first bytes and its length, so that a string refused
// for its size does not make an error message of that size.
func clipID(id string) string {
	const keep = 64
	if len(id) <= journal.MaxIDBytes {
		return id
	}
	cut := keep
	for cut > 0 && !utf8.RuneStart(id[cut]) {
		cut--
	}
	return fmt.Sprintf("%s...(%d bytes)", id[:cut], len(id))
}
