package actors

import "context"

// EnterForTesting exposes ModelGate.enter to the tests of package actors_test.
func EnterForTesting(g *ModelGate, ctx context.Context, conv string) (func(), error) {
	return g.enter(ctx, conv)
}

// EnterToolForTesting exposes ToolGate.enter to the tests of package actors_test.
func EnterToolForTesting(g *ToolGate, ctx context.Context, conv, id string) (func(), error) {
	return g.enter(ctx, conv, id)
}
