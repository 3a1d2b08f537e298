package agent_test

import (
	"context"
	"fmt"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
)

func ExampleRegistry_RunServer() {
	r, err := agent.NewRegistry(agent.Tool{
		Name:         "balance",
		Description:  "Returns the user's account balance.",
		Executor:     messages.Executor_EXECUTOR_SERVER,
		RequiresUser: true,
		Run: func(_ context.Context, inv agent.Invocation) (string, error) {
			return fmt.Sprintf(`{"user":%q,"balance":42}`, inv.Scope.UserID), nil
		},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	inv := agent.Invocation{ConversationID: "c1", ToolCallID: "call-1", Name: "balance", Arguments: `{}`}

	inv.Scope = agent.Scope{UserID: "alice"}
	fmt.Println(r.RunServer(ctx, inv).GetContent())

	inv.Scope = agent.SystemScope // an expiry-driven run has no user
	e := r.RunServer(ctx, inv).GetError()
	fmt.Println(e.GetCode(), e.GetMessage())
	// Output:
	// {"user":"alice","balance":42}
	// scope agent: tool requires a user scope
}
