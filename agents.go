package lazarus

import (
	"context"
	"fmt"
	"slices"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// Multi-agent conversations: Options.Agents, SendOptions.Agent and
// Broadcast, AgentView (HistoryOptions.Agent, SubscribeOptions.Agent).

// ErrUnknownAgent is wrapped by the error of a send addressed to an agent
// not in Options.Agents, of an Edit of a message addressed to one, or of a
// HistoryView or SubscribeWith with the view of one, with
// journal.ErrInvalid. Nothing is written.
var ErrUnknownAgent = actors.ErrUnknownAgent

// HandoffToolName is the name of the built-in tool an agent calls to pass
// the turn to another, with arguments {"agent": name, "message": text}
// (DefaultAgentName names the default agent). It is registered when
// Options.Agents is not empty.
const HandoffToolName = actors.HandoffToolName

// DefaultAgentName is how the handoff tool's arguments name the default
// agent (whose name everywhere else is "").
const DefaultAgentName = actors.DefaultAgentName

// Agent is a named agent the conversations of a Runtime can hold besides
// their default agent (the one a conversation without named agents has,
// configured by Options.Model, Tools and Settings).
//
// Every event belongs to one agent (Event.agent; "" is the default agent)
// and may be shared with others (Event.audience): an agent's model sees
// exactly its own events and those shared with it. A user message belongs
// to the agent it is addressed to (SendOptions.Agent), and is shared with
// every agent when broadcast; a model's answer, its calls and their results
// belong to the agent whose model wrote them. One agent has the turn at a
// time: the agent a message is addressed to answers it; an agent passes
// the turn to another by calling the built-in handoff tool, whose result
// and a handoff event (that the next agent's model sees as a user message)
// are written in one atomic write, as any server call's result, so a kill
// in the middle is finished, once, by the next activation.
//
// Summaries are per agent (Options.Summarizer, Options.Summary): each
// summary record holds the default agent's summary and, at the same seq,
// one per named agent (messages.Summary.agents), each written from that
// agent's visible events only; an agent's model starts from its own. A
// Runtime without named agents does not summarize a span holding named
// agents' or shared events. An agent removed from Options.Agents keeps its
// events in the log and private: they owe no turn, and no other agent sees
// them.
type Agent struct {
	// Name is the agent's name: 1 to 64 bytes of ASCII letters, digits,
	// '_', '-' and '.', unique, and not DefaultAgentName. Required.
	Name string
	// Model answers the agent's turns. Default Options.Model (a nil
	// pointer or agent.ModelFunc in the interface is refused by Open:
	// ErrInvalid).
	Model agent.Model
	// Settings are the agent's model settings (its system prompt, model
	// name, sampling), over the conversation's own and Options.Settings,
	// field by field. Validated at Open.
	Settings agent.Settings
	// Tools names the tools of Options.Tools the agent may call; it may
	// always call the handoff tool. Default: only the handoff tool.
	Tools []string
}

// agentConfigs validates opts.Agents against the registry (which holds
// the handoff tool when there are agents) and returns them by name, nil
// when there are none. Errors wrap journal.ErrInvalid.
func agentConfigs(opts Options, reg *agent.Registry, model func(agent.Model) agent.Model) (map[string]actors.AgentConfig, error) {
	if len(opts.Agents) == 0 {
		return nil, nil
	}
	out := make(map[string]actors.AgentConfig, len(opts.Agents))
	for i, a := range opts.Agents {
		if err := actors.ValidateAgentName(a.Name); err != nil {
			return nil, fmt.Errorf("lazarus: Options.Agents[%d]: %w", i, err)
		}
		if _, dup := out[a.Name]; dup {
			return nil, fmt.Errorf("lazarus: Options.Agents[%d]: %w", i, journal.Invalidf("agent %q is named twice", a.Name))
		}
		for _, t := range a.Tools {
			if _, ok := reg.Lookup(t); !ok {
				return nil, fmt.Errorf("lazarus: agent %q: %w", a.Name, journal.Invalidf("tool %q is not in Options.Tools", t))
			}
		}
		if err := agent.ValidateSettings(a.Settings, reg); err != nil {
			return nil, fmt.Errorf("lazarus: agent %q: Settings: %w", a.Name, err)
		}
		if tc := a.Settings.ToolChoice; tc != "" && tc != HandoffToolName && !slices.Contains(a.Tools, tc) {
			if _, ok := reg.Lookup(tc); ok {
				return nil, fmt.Errorf("lazarus: agent %q: Settings: %w", a.Name, journal.Invalidf("tool choice %q is not one of the agent's tools", tc))
			}
		}
		var m agent.Model
		if a.Model != nil {
			m = model(a.Model)
		}
		out[a.Name] = actors.AgentConfig{Model: m, Settings: a.Settings, Tools: slices.Clone(a.Tools)}
	}
	return out, nil
}

// withHandoff returns the tools of the registry: opts.Tools, and the
// handoff tool when there are named agents.
func withHandoff(opts Options) []agent.Tool {
	if len(opts.Agents) == 0 {
		return opts.Tools
	}
	return append(slices.Clone(opts.Tools), actors.HandoffTool())
}

// checkAddress refuses a send addressed to an agent the Runtime does not
// know (ErrUnknownAgent).
func (r *Runtime) checkAddress(opts SendOptions) error {
	if opts.Agent == "" {
		return nil
	}
	if !slices.ContainsFunc(r.opts.Agents, func(a Agent) bool { return a.Name == opts.Agent }) {
		return fmt.Errorf("agent %q: %w (%w)", clipID(opts.Agent), ErrUnknownAgent, journal.ErrInvalid)
	}
	return nil
}

// AgentView selects what one agent of a conversation sees: the events that
// belong to it or are shared with it (see Agent). Name "" is the default
// agent; any other name must be in Options.Agents (Runtime.HasAgent), or
// the call taking the view fails with ErrUnknownAgent and
// journal.ErrInvalid, even if the log holds that agent's events (an agent
// removed from Options.Agents). A nil *AgentView selects every event.
type AgentView struct {
	Name string
}

// ViewOf returns the view of the agent name ("" for the default agent).
func ViewOf(name string) *AgentView { return &AgentView{Name: name} }

// checkView refuses the view of an agent the Runtime does not know
// (ErrUnknownAgent, with journal.ErrInvalid): the same rule as a send's
// address, so that a view is never of an agent no send can reach.
func (r *Runtime) checkView(v *AgentView) error {
	if v == nil || v.Name == "" || r.HasAgent(v.Name) {
		return nil
	}
	return fmt.Errorf("view of agent %q: %w (%w)", clipID(v.Name), ErrUnknownAgent, journal.ErrInvalid)
}

// sees reports whether the view keeps ev (a nil view keeps all).
func (v *AgentView) sees(u Update) bool {
	if v == nil {
		return true
	}
	if u.Event != nil {
		return snapshot.VisibleTo(u.Event, v.Name)
	}
	if u.Delta != "" {
		return u.Agent == v.Name
	}
	return true
}

// SubscribeOptions are the options of SubscribeWith. The zero value is
// Subscribe's behaviour.
type SubscribeOptions struct {
	// Agent, if set, keeps only the updates of what that agent sees: the
	// events that belong to it or are shared with it, and the deltas its
	// own model streams. Updates without an event or a delta (retries,
	// failed writes, turn ends of cancelled turns) are kept. The agent
	// must be known (see AgentView). Default nil: every update.
	Agent *AgentView
}

// SubscribeWith is Subscribe with options: with SubscribeOptions.Agent,
// one agent's part of the conversation. The stream's guarantees are
// Subscribe's, for the updates the view keeps; an update it drops still
// counts against SubscriberBuffer until it is dropped. The view of an agent
// not in Options.Agents is refused with an error wrapping ErrUnknownAgent
// and journal.ErrInvalid (see AgentView).
func (r *Runtime) SubscribeWith(ctx context.Context, conversationID string, afterSeq uint64, opts SubscribeOptions) (<-chan Update, error) {
	if err := r.enter(ctx); err != nil {
		return nil, fmt.Errorf("lazarus: subscribe to %q: %w", clipID(conversationID), err)
	}
	if err := r.checkView(opts.Agent); err != nil {
		return nil, fmt.Errorf("lazarus: subscribe to %q: %w", clipID(conversationID), err)
	}
	in, err := r.Subscribe(ctx, conversationID, afterSeq)
	if err != nil || opts.Agent == nil {
		return in, err
	}
	view := opts.Agent
	out := make(chan Update)
	go func() {
		defer close(out)
		for u := range in {
			if !view.sees(u) {
				continue
			}
			select {
			case out <- u:
			case <-ctx.Done():
				// Drain: the hub closes in once ctx ended.
				for range in {
				}
				return
			case <-r.hub.life.Done():
				// Close: in ends too (the hub's pump, or a cluster
				// follower, stops with the Runtime), and a reader that
				// stopped reading must not hold this goroutine.
				for range in {
				}
				return
			}
		}
	}()
	return out, nil
}

// address is the AgentSend address of a send: nil for the default agent,
// not broadcast (an AgentSend as before agents existed). Without named
// agents a broadcast is shared with the default agent alone, which is
// every message: it is addressed as any other, so that nothing changes
// (an audience would hold the conversation's summaries back, see
// snapshot.WorkingSet.HoldsAgents).
func (r *Runtime) address(opts SendOptions) *messages.AgentAddress {
	if len(r.opts.Agents) == 0 {
		opts.Broadcast = false
	}
	if opts.Agent == "" && !opts.Broadcast {
		return nil
	}
	return &messages.AgentAddress{Agent: opts.Agent, Broadcast: opts.Broadcast}
}
