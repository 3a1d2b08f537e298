package memjournal_test

import (
	"context"
	"fmt"
	"time"

	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func userMsg(text string) *messages.Event {
	return &messages.Event{
		Time: timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
		Body: &messages.Event_UserMsg{UserMsg: &messages.UserMessage{
			Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}},
		}},
	}
}

// Append three events, summarize the first two, and read what a revival
// reads: the summary and the events after it.
func Example() {
	ctx := context.Background()
	s := memjournal.New(memjournal.Options{})
	defer s.Close()

	res, err := s.Append(ctx, &messages.AppendRequest{
		ConversationId: "chat-1",
		ExpectedLast:   0, // an empty log
		Events:         []*messages.Event{userMsg("hello"), userMsg("plan a trip"), userMsg("to Lisbon")},
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("appended seqs %d..%d\n", res.FirstSeq, res.LastSeq)

	// A second writer that still believes the log is empty is fenced off.
	_, err = s.Append(ctx, &messages.AppendRequest{ConversationId: "chat-1", Events: []*messages.Event{userMsg("hi?")}})
	fmt.Println("stale writer:", err != nil)

	if err := s.PutSummary(ctx, "chat-1", &messages.Summary{FromSeq: 1, ToSeq: 2, Content: "greeted; wants a trip"}); err != nil {
		panic(err)
	}
	sum, events, err := s.LoadSince(ctx, "chat-1")
	if err != nil {
		panic(err)
	}
	fmt.Printf("summary %d..%d: %s\n", sum.GetFromSeq(), sum.GetToSeq(), sum.GetContent())
	for _, ev := range events {
		fmt.Printf("event %d: %s\n", ev.GetSeq(), ev.GetUserMsg().GetContent()[0].GetText())
	}
	// Output:
	// appended seqs 1..3
	// stale writer: true
	// summary 1..2: greeted; wants a trip
	// event 3: to Lisbon
}
