package lazarus_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
)

// appActor is an application's own actor: it talks to a conversation
// through the gateway's protobuf protocol (messages/lazarus/v1/cluster.proto),
// not through the Go facade. It subscribes first, then sends, and reports
// the answer.
type appActor struct {
	gateway *actor.PID
	done    chan string
}

func (a *appActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		self := ctx.Self()
		ctx.Request(a.gateway, &messages.ClusterSubscribe{RequestId: 1, SubscriptionId: "app-1",
			ConversationId: "support-7", ReplyAddress: self.Address, ReplyId: self.Id})
	case *messages.ClusterReply:
		if m.GetError() != nil {
			a.done <- "error: " + m.GetError().GetMessage()
			return
		}
		if m.GetRequestId() == 1 { // subscribed: now send
			ctx.Request(a.gateway, &messages.ClusterRequest{RequestId: 2, ConversationId: "support-7",
				Scope: &messages.ClusterScope{UserId: "ada"},
				Op: &messages.ClusterRequest_Send{Send: &messages.AgentSend{RequestId: "first",
					Message: agent.UserMessage(agent.TextPart("hello"))}}})
		}
	case *messages.ClusterUpdate:
		if ans := m.GetEvent().GetAssistantMsg(); ans != nil {
			var text []string
			for _, p := range ans.GetContent() {
				text = append(text, p.GetText())
			}
			a.done <- fmt.Sprintf("seq %d: %s", m.GetEvent().GetSeq(), strings.Join(text, ""))
		}
	}
}

// An application that runs its own protoactor actor system hosts the
// Runtime in it (Options.ActorSystem), and its actors talk to
// conversations through the gateway actor (lazarus.GatewayName) with
// protobuf messages: ClusterRequest (send, resolve, wake, ...) answered by
// ClusterReply, and ClusterSubscribe, which streams ClusterUpdate messages
// to the actor named in it.
func Example_applicationActor() {
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	defer system.Shutdown()
	model := agent.ModelFunc(func(ctx context.Context, turn agent.Turn, _ func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("hi, how can I help?"), nil
	})
	rt, err := lazarus.Open(lazarus.Options{Model: model, ActorSystem: system})
	if err != nil {
		panic(err)
	}
	defer rt.Close()
	done := make(chan string, 1)
	gateway := actor.NewPID(system.Address(), lazarus.GatewayName)
	system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &appActor{gateway: gateway, done: done} }))
	select {
	case line := <-done:
		fmt.Println(line)
	case <-time.After(time.Minute):
		fmt.Println("no answer within a minute")
	}
	// Output: seq 2: hi, how can I help?
}
