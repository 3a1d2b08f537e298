package lazarus_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/render"
)

// A complete program: a Model of your own, a server tool, a human approval
// that only an approver may give, SendAndWait, and a subscription that
// stops at the end of a turn. The conversation suspends on the approval,
// loses its actor, and is revived by the answer; the log says who asked and
// who answered.
func Example() {
	ctx := context.Background()
	// Any agent.Model: this one stands for your provider's adapter.
	model := agent.ModelFunc(func(ctx context.Context, turn agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
		last := turn.Context[len(turn.Context)-1]
		switch {
		case last.GetUserMsg() != nil:
			return agent.Reply("", agent.Call("lookup_order", `{"order":42}`)), nil
		case last.GetToolResult().GetName() == "lookup_order":
			return agent.Reply("This refund needs approval.", agent.Call("approve_refund", `{"amount":120}`)), nil
		default:
			return agent.Text("Refund sent."), nil
		}
	})
	rt, err := lazarus.Open(lazarus.Options{
		Model: model, // an in-memory store: no Dir
		Tools: []agent.Tool{
			{Name: "lookup_order", Executor: messages.Executor_EXECUTOR_SERVER,
				Run: func(ctx context.Context, inv agent.Invocation) (string, error) { return `{"total":120}`, nil }},
			{Name: "approve_refund", Executor: messages.Executor_EXECUTOR_HUMAN,
				Prompt:     func(args string) string { return "Approve the refund " + args + "?" },
				Authorizer: agent.RequireRole("approver")},
		},
	})
	if err != nil {
		panic(err)
	}
	defer rt.Close()

	// SendAndWait returns once the turn is over: here, suspended.
	end, err := rt.SendAndWait(ctx, "order-42", "Please refund order 42.", agent.Scope{UserID: "alice"})
	if err != nil {
		panic(err)
	}
	fmt.Println(end.Outcome, end.Pending[0].GetPrompt())

	rt.Kill("order-42") // the actor is gone; the conversation is not
	call := end.Pending[0].GetToolCallId()
	err = rt.Resolve(ctx, call, `{"approved":true}`, agent.Scope{UserID: "alice"})
	fmt.Println("alice may approve:", !errors.Is(err, lazarus.ErrForbidden))

	updates, _ := rt.Subscribe(ctx, "order-42", end.Seq)
	bob := agent.Scope{UserID: "bob", Roles: []string{"approver"}}
	if err := rt.Resolve(ctx, call, `{"approved":true}`, bob); err != nil {
		panic(err)
	}
	for u := range updates {
		switch {
		case u.Event.GetResolution() != nil:
			fmt.Println("resolution by", render.Identity(u.Event.GetResolution().GetResolver()))
		case u.Event != nil:
			fmt.Println(render.EventType(u.Event))
		}
		if u.TurnEnd != nil { // the resumed turn is over
			fmt.Println(u.TurnEnd.Outcome, u.TurnEnd.Text)
			break
		}
	}
	// Output:
	// suspended Approve the refund {"amount":120}?
	// alice may approve: false
	// resolution by bob[approver]
	// tool_result
	// assistant_msg
	// answered Refund sent.
}
