package lazarus

import (
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
