package lazarus

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/messages"
)

// TestListWakeupsJoinsTextPartsByNewlines: the list_wakeups tool shows a
// schedule's message as ScheduleText does (its text parts joined by
// newlines, a part with no text left out), as the HTTP API and lazarus
// schedules do; it joined them with nothing.
func TestListWakeupsJoinsTextPartsByNewlines(t *testing.T) {
	sc := &messages.Schedule{Id: "parts", ConversationId: "c", Payload: &messages.UserMessage{Content: []*messages.ContentPart{
		{Part: &messages.ContentPart_Text{Text: "first"}},
		{Part: &messages.ContentPart_Image{Image: &messages.Blob{MediaType: "image/png", Uri: "https://example.com/a.png"}}},
		{Part: &messages.ContentPart_Text{Text: "second"}},
	}}}
	require.Equal(t, "first\nsecond", ScheduleText(sc))
	require.Equal(t, "first\nsecond", viewOf(sc).Text)
	require.Empty(t, ScheduleText(&messages.Schedule{Id: "none"}), "no message, no text")
}
