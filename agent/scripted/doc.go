// Package scripted is an agent.Model whose answers are scripted: tests and
// the demo queue replies per conversation, and the model returns them in
// order. It also records every turn it was given, and can hold a call open
// until the test releases it, so a test can kill an agent in the middle of a
// model call without sleeping:
//
//	m := scripted.New(scripted.Options{})
//	m.Push("c1", scripted.Reply("", scripted.Call("lookup", `{"q":"x"}`)), scripted.Text("done"))
//	entered := m.Hold("c1")
//	// ... send a user message to c1 ...
//	<-entered // Generate for c1 has started and is blocked
//	// ... kill the agent: its ctx is cancelled, Generate returns ctx.Err()
//	//     and the queued reply stays queued for the revived agent ...
//
// The package starts no goroutines.
package scripted
