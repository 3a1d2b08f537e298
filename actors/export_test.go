package actors

import "context"

// EnterForTesting exposes ModelGate.enter to the tests of package actors_test.
func EnterForTesting(g *ModelGate, ctx context.Context, conv string) (func(), error) {
	return g.enter(ctx, conv)
}
