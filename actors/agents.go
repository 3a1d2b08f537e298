package actors

import (
	"context"
	"errors"
	"fmt"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// Multi-agent conversations. A conversation can hold named agents besides
// its default one (the agent "", the only one of a conversation that names
// none). Every event belongs to one agent (Event.agent) and may be shared
// with others (Event.audience); an agent's model sees its own events and
// those shared with it (snapshot.VisibleTo). One agent has the turn at a
// time; an agent passes it to another with a call of the built-in handoff
// tool, which the conversation's core answers itself.

// HandoffToolName is the name of the built-in handoff tool. The runtime
// registers it (HandoffTool) when named agents are configured.
const HandoffToolName = "handoff"

// DefaultAgentName is how the handoff tool's arguments name the default
// agent (whose name in events is ""). No named agent may be called so.
const DefaultAgentName = "default"

// MaxAgentNameBytes bounds an agent's name.
const MaxAgentNameBytes = 64

// ErrUnknownAgent is wrapped by the error of a send addressed to an agent
// the runtime does not know. Nothing is written.
var ErrUnknownAgent = errors.New("lazarus: unknown agent")

// AgentConfig is one named agent of the conversations of a runtime.
type AgentConfig struct {
	// Model answers the agent's turns. Nil means ConversationConfig.Model.
	Model agent.Model
	// Settings are the agent's model settings (system prompt, model name,
	// sampling), over the conversation's own and the runtime's defaults,
	// field by field.
	Settings agent.Settings
	// Tools names the tools of the registry the agent may call; the handoff
	// tool is always among them. A call of another tool is an invalid call
	// (its model sees the error). Nil means only the handoff tool.
	Tools []string
}

// ValidateAgentName checks the name of a named agent: 1 to
// MaxAgentNameBytes bytes of ASCII letters, digits, '_', '-' and '.', and
// not DefaultAgentName. Errors wrap journal.ErrInvalid.
func ValidateAgentName(name string) error {
	switch {
	case name == "":
		return journal.Invalidf("empty agent name")
	case len(name) > MaxAgentNameBytes:
		// Not quoted: a name refused for its size does not make an
		// error of that size.
		return journal.Invalidf("agent name of %d bytes exceeds %d", len(name), MaxAgentNameBytes)
	}
	if name == DefaultAgentName {
		return journal.Invalidf("agent name %q is the default agent's", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return journal.Invalidf("agent name %q: only ASCII letters, digits, '_', '-' and '.' are allowed", name)
		}
	}
	return nil
}

// HandoffTool returns the built-in handoff tool: a server tool whose
// arguments are {"agent": name, "message": text}. Its calls are answered
// by the conversation's core, never by Run: the call's result and a
// handoff event that gives the turn to the named agent are written in one
// atomic write, like any server call's result, so a kill in the middle is
// recovered by the next activation, which finishes the handoff once.
func HandoffTool() agent.Tool {
	return agent.Tool{
		Name:        HandoffToolName,
		Description: "Pass the turn to another agent of this conversation, with a message for it. Your turn ends.",
		Executor:    messages.Executor_EXECUTOR_SERVER,
		Parameters: `{"type":"object","properties":{"agent":{"type":"string","description":"the agent to pass the turn to (` +
			DefaultAgentName + ` for the default agent)"},"message":{"type":"string","description":"what to tell it"}},"required":["agent"]}`,
		Run: func(context.Context, agent.Invocation) (string, error) {
			// Unreachable from a conversation: its core answers handoffs.
			return "", fmt.Errorf("the handoff tool is answered by the conversation")
		},
	}
}
