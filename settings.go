package lazarus

import (
	"context"
	"fmt"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// Configure sets the conversation's own model settings: its system prompt,
// model name, temperature, max tokens and tool choice. They replace the
// ones it had (a field left zero falls back to Options.Settings, then to
// the Model's own configuration), are persisted in the conversation's row,
// and apply from the conversation's next model call on, in this process
// and in any later one (a revival or a restart reads them back). Configure
// may come before the first Send: it creates the conversation, idle.
//
// It returns once the settings are durable. Invalid settings (see
// agent.ValidateSettings: a tool choice must name a registered tool) are
// refused with an error wrapping journal.ErrInvalid, and nothing is
// written; a deleted conversation, with one wrapping journal.ErrDeleted;
// an ended conversation (see End), which runs no turn again, with one
// wrapping journal.ErrEnded, its settings left as they were. Retrying after ErrUnknownOutcome is safe.
func (r *Runtime) Configure(ctx context.Context, conversationID string, s agent.Settings) error {
	if err := r.enter(ctx); err != nil {
		return fmt.Errorf("lazarus: configure %q: %w", clipID(conversationID), err)
	}
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return fmt.Errorf("lazarus: configure: %w", err)
	}
	if err := agent.ValidateSettings(s, r.tools); err != nil {
		return fmt.Errorf("lazarus: configure %q: %w", clipID(conversationID), err)
	}
	op := fmt.Sprintf("lazarus: configure %q", clipID(conversationID))
	res, err := r.ask(ctx, conversationID, &actors.Command{Scope: agent.SystemScope, Msg: &messages.AgentConfigure{Settings: s.Map()}})
	if err != nil {
		return r.callErr(op, err)
	}
	if err := agentReplyErr(res); err != nil {
		return r.callErr(op, err)
	}
	return nil
}

// Settings returns the conversation's own model settings, as Configure
// last set them (the zero Settings if never; Options.Settings is not
// merged in). An unknown conversation is an error wrapping
// journal.ErrNotFound; a deleted one, journal.ErrDeleted where the Store
// reports tombstones.
func (r *Runtime) Settings(ctx context.Context, conversationID string) (agent.Settings, error) {
	if err := r.enter(ctx); err != nil {
		return agent.Settings{}, fmt.Errorf("lazarus: settings of %q: %w", clipID(conversationID), err)
	}
	if err := journal.ValidateID("conversation id", conversationID); err != nil {
		return agent.Settings{}, fmt.Errorf("lazarus: settings: %w", err)
	}
	row, err := r.store.Conversation(ctx, conversationID)
	if err != nil {
		return agent.Settings{}, r.callErr(fmt.Sprintf("lazarus: settings of %q", clipID(conversationID)), err)
	}
	return agent.SettingsOf(row.GetSettings()), nil
}
