package main

import (
	"fmt"
	"strings"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
)

// demoCallPrefix starts a user message that makes the demo model call a
// tool: "/call NAME {JSON arguments}".
const demoCallPrefix = "/call "

// newDemoModel returns the demo model of 'lazarus serve' (model provider
// "scripted"): no language model, a fixed rule, for trying a node and for
// tests. To a user message "/call NAME ARGS" it answers with a call of the
// tool NAME with the JSON arguments ARGS ({} if none); to a tool result,
// with a text quoting it; to any other message, with "You said: " and the
// message.
func newDemoModel() agent.Model {
	return scripted.New(scripted.Options{Chunk: 8, Default: demoReply})
}

func demoReply(_ string, turn agent.Turn) (*messages.AssistantMessage, error) {
	if len(turn.Context) == 0 {
		return scripted.Text("Hello."), nil
	}
	last := turn.Context[len(turn.Context)-1]
	switch {
	case last.GetUserMsg() != nil:
		var b strings.Builder
		for _, p := range last.GetUserMsg().GetContent() {
			b.WriteString(p.GetText())
		}
		text := strings.TrimSpace(b.String())
		if rest, ok := strings.CutPrefix(text, demoCallPrefix); ok {
			name, args, _ := strings.Cut(strings.TrimSpace(rest), " ")
			if args = strings.TrimSpace(args); args == "" {
				args = "{}"
			}
			return scripted.Reply("Calling "+name+".", scripted.Call(name, args)), nil
		}
		return scripted.Text("You said: " + text), nil
	case last.GetToolResult() != nil:
		r := last.GetToolResult()
		if e := r.GetOutcome().GetError(); e != nil {
			return scripted.Text(fmt.Sprintf("%s failed (%s): %s", r.GetName(), e.GetCode(), e.GetMessage())), nil
		}
		return scripted.Text(fmt.Sprintf("%s answered: %s", r.GetName(), r.GetOutcome().GetContent())), nil
	}
	return scripted.Text("Done."), nil
}
