package pebblejournal_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
)

func Example() {
	ctx := context.Background()
	// In production: pebblejournal.Open("/var/lib/lazarus", pebblejournal.Options{}).
	s, err := pebblejournal.Open("journal", pebblejournal.Options{FS: vfs.NewMem()})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	say := func(text string) *messages.Event {
		return &messages.Event{Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
			Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}},
		}}}
	}
	res, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "conv-1", Events: []*messages.Event{say("hi"), say("book a table")}})
	fmt.Println(res.FirstSeq, res.LastSeq, err) // durable once err is nil

	// A second writer that believes the log ends at 1 is fenced off.
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "conv-1", ExpectedLast: 1, Events: []*messages.Event{say("late")}})
	fmt.Println(errors.Is(err, journal.ErrConflict))

	_, evs, _ := s.LoadSince(ctx, "conv-1")
	for _, ev := range evs {
		fmt.Println(ev.GetSeq(), ev.GetUserMsg().GetContent()[0].GetText())
	}
	// Output:
	// 1 2 <nil>
	// true
	// 1 hi
	// 2 book a table
}
