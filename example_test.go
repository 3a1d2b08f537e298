package lazarus_test

import (
	"context"
	"fmt"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
)

// A conversation that suspends on a human approval, loses its actor, and is
// revived by the approval.
func Example() {
	ctx := context.Background()
	model := scripted.New(scripted.Options{})
	model.Push("order-42",
		scripted.Reply("This refund needs approval.", scripted.Call("approve_refund", `{"amount":120}`)),
		scripted.Text("Refund sent."))
	rt, err := lazarus.Open(lazarus.Options{
		Model: model, // an in-memory store: no Dir
		Tools: []agent.Tool{{Name: "approve_refund", Executor: messages.Executor_EXECUTOR_HUMAN}},
	})
	if err != nil {
		panic(err)
	}
	defer rt.Close()
	updates, _ := rt.Subscribe(ctx, "order-42", 0)

	_, _ = rt.Send(ctx, "order-42", "Please refund order 42.", agent.Scope{UserID: "alice"})
	var callID string
	for u := range updates {
		if s := u.Event.GetSuspension(); s != nil {
			callID = s.GetPending()[0].GetToolCallId()
			break
		}
	}
	rt.Kill("order-42") // the actor is gone; the conversation is not
	_ = rt.Resolve(ctx, callID, `{"approved":true}`, agent.Scope{UserID: "bob"})
	for u := range updates {
		if text := u.Event.GetAssistantMsg().GetContent(); len(text) > 0 && u.Event.GetAssistantMsg().GetToolCalls() == nil {
			fmt.Println(text[0].GetText())
			break
		}
	}
	history, _ := rt.History(ctx, "order-42", 0, 0)
	fmt.Println(len(history), "events")
	// Output:
	// Refund sent.
	// 7 events
}
