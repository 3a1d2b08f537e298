package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// act1: Alice asks for a refund above the agent's limit. The agent looks the
// order up (a server tool), asks a human to approve (a human tool), and
// suspends.
func (d *demo) act1(ctx context.Context) error {
	if err := d.openRuntime(nil); err != nil {
		return err
	}
	if err := d.follow(convRefund, 0); err != nil {
		return err
	}
	d.say("Alice asks the support agent for a refund. The agent may refund up to 100 EUR on its own; above that, a human must approve.")
	if err := d.pause(ctx, 1); err != nil {
		return err
	}
	d.model.Push(convRefund, replyLookup, replyAskLead)
	if _, err := d.rt.Send(ctx, convRefund, "Please refund order A-1042: it arrived broken.", alice); err != nil {
		return err
	}
	susp, err := d.await(ctx, convRefund, 0, "the agent to suspend on a human", isSuspension)
	if err != nil {
		return err
	}
	call, err := pendingCall(susp.ev)
	if err != nil {
		return err
	}
	d.approvalID = call.GetToolCallId()
	d.say("The agent looked the order up, asked a support lead to approve, and suspended. It may now wait hours.")

	runs := d.runs.of(toolLookup)
	d.check("the server tool ran once", len(runs) == 1, "%s ran %d time(s)", toolLookup, len(runs))
	d.check("the agent suspended on the human tool", call.GetKind() == toolApprove, "waiting on %s, call %s", call.GetKind(), call.GetToolCallId())
	conv, err := d.rt.Store().Conversation(ctx, convRefund)
	if err != nil {
		return err
	}
	st := conv.GetFsmState()
	d.check("the suspension is durable", conv.GetStatus() == messages.ConversationStatus_CONVERSATION_STATUS_SUSPENDED &&
		st.GetState() == messages.AgentState_AGENT_STATE_AWAITING_INPUT && st.GetPending()[d.approvalID] != nil,
		"stored status %s, state %s, %d pending", enumName(conv.GetStatus().String(), "CONVERSATION_STATUS_"),
		enumName(st.GetState().String(), "AGENT_STATE_"), len(st.GetPending()))
	d.check("the agent's actor is live", d.rt.IsActive(convRefund), "IsActive(%s)", convRefund)
	return nil
}

// act2: the refund agent is killed. The journal, the expiry actor and an
// unrelated conversation carry on.
func (d *demo) act2(ctx context.Context) error {
	d.say("Now kill the refund agent's actor, as a crash, a deploy or an idle eviction would.")
	if err := d.pause(ctx, 1); err != nil {
		return err
	}
	killed := d.rt.Kill(convRefund)
	d.say("Killed. Its memory is gone; its log, its pending call and the call's deadline are on disk.")
	d.check("the refund agent is dead", killed && !d.rt.IsActive(convRefund), "Kill returned %v, IsActive %v", killed, d.rt.IsActive(convRefund))
	at, scheduled, err := deadlineOf(ctx, d.rt.Store(), d.approvalID)
	if err != nil {
		return err
	}
	d.check("its approval deadline is still scheduled", scheduled && at.After(time.Now()),
		"due at %s; the expiry actor, not the agent, holds the timer", at.Local().Format(time.TimeOnly))
	if err := d.pause(ctx, 1); err != nil {
		return err
	}

	d.say("Meanwhile Bob, in an unrelated conversation, asks about opening hours.")
	if err := d.follow(convHours, 0); err != nil {
		return err
	}
	d.model.Push(convHours, replyHours)
	if _, err := d.rt.Send(ctx, convHours, "When are you open?", bob); err != nil {
		return err
	}
	answer, err := d.await(ctx, convHours, 0, "the answer to Bob", isAnswer)
	if err != nil {
		return err
	}
	d.check("another conversation is answered while the refund agent is dead",
		texts(answer.ev.GetAssistantMsg().GetContent()) != "" && !d.rt.IsActive(convRefund),
		"the journal wrote %d events for Bob; refund agent live: %v", answer.ev.GetSeq(), d.rt.IsActive(convRefund))
	return nil
}

// act3: a human approves. The dead agent revives from its log, records the
// answer, and finishes the turn.
func (d *demo) act3(ctx context.Context) error {
	d.say("Dana, a support lead, approves the refund. Nobody restarts the agent: the answer itself revives it.")
	if err := d.pause(ctx, 1); err != nil {
		return err
	}
	d.model.Push(convRefund, replyRefunded)
	last, err := d.rt.Store().LastSeq(ctx, convRefund)
	if err != nil {
		return err
	}
	began := time.Now()
	if err := d.rt.Resolve(ctx, d.approvalID, `{"approved":true,"by":"dana"}`, dana); err != nil {
		return err
	}
	res, err := d.await(ctx, convRefund, last, "the approval to be recorded", isResolutionOf(d.approvalID))
	if err != nil {
		return err
	}
	d.revived(3, convRefund, "a human's answer", res.at.Sub(began))
	if _, err := d.await(ctx, convRefund, res.ev.GetSeq(), "the agent's reply", isAnswer); err != nil {
		return err
	}
	d.say("The agent came back from its log (%s from the answer to its first new event), knew it owed the model the approval, and finished the turn.",
		millis(durationMillis(res.at.Sub(began))))

	runs := d.runs.of(toolLookup)
	d.check("the revived agent did not run the server tool again", len(runs) == 1, "%s ran %d time(s) in all", toolLookup, len(runs))
	turns := d.model.Turns(convRefund)
	var approval string
	if len(turns) > 0 {
		for _, ev := range turns[len(turns)-1].Context {
			if ev.GetToolResult().GetToolCallId() == d.approvalID {
				approval = ev.GetToolResult().GetOutcome().GetContent()
			}
		}
	}
	d.check("the model saw the approval", strings.Contains(approval, `"approved":true`), "tool result %s", approval)
	evs, err := d.history(ctx, convRefund)
	if err != nil {
		return err
	}
	want := []string{
		"user_msg", "assistant_msg", "tool_call:" + toolLookup, "tool_result:" + toolLookup,
		"assistant_msg", "tool_call:" + toolApprove, "suspension",
		"resolution:resolved", "tool_result:" + toolApprove, "assistant_msg",
	}
	got := types(evs)
	d.check("the log tells the whole story, gap-free", slices.Equal(got, want) && gapFree(evs), "%s", strings.Join(got, ", "))
	return nil
}

// act4: a second request suspends; the agent is killed; nobody answers. The
// deadline passes while it is dead, the expiry actor revives it with a
// timeout result, and a late approval is refused as stale.
func (d *demo) act4(ctx context.Context) error {
	d.say("Alice asks for a second refund: 900 EUR. That needs a manager, who gets %v to sign it off.", d.pace.signoff)
	if err := d.pause(ctx, 1); err != nil {
		return err
	}
	d.model.Push(convRefund, replyAskMgr, replyNoSignoff)
	last, err := d.rt.Store().LastSeq(ctx, convRefund)
	if err != nil {
		return err
	}
	if _, err := d.rt.Send(ctx, convRefund, "And order A-2077 too, please: 900 EUR, same problem.", alice); err != nil {
		return err
	}
	susp, err := d.await(ctx, convRefund, last, "the agent to suspend on a manager", isSuspension)
	if err != nil {
		return err
	}
	killed := d.rt.Kill(convRefund)
	killedAt := time.Now()
	call, err := pendingCall(susp.ev)
	if err != nil {
		return err
	}
	id := call.GetToolCallId()
	row, err := d.rt.Store().ToolCall(ctx, id)
	if err != nil {
		return err
	}
	deadline := row.GetDeadline().AsTime()
	d.check("the agent is killed before its deadline", killed && !d.rt.IsActive(convRefund) && killedAt.Before(deadline),
		"killed %s before the deadline of %s", deadline.Sub(killedAt).Round(time.Millisecond), call.GetKind())
	d.say("The agent is dead and nobody answers. The deadline passes at %s with no agent alive: the expiry actor fires it.",
		deadline.Local().Format("15:04:05.000"))

	res, err := d.await(ctx, convRefund, susp.ev.GetSeq(), "the deadline to fire", isResolutionOf(id))
	if err != nil {
		return err
	}
	d.revived(4, convRefund, "a deadline", res.at.Sub(deadline))
	result, err := d.await(ctx, convRefund, res.ev.GetSeq(), "the timeout result", isResultOf(id))
	if err != nil {
		return err
	}
	if _, err := d.await(ctx, convRefund, result.ev.GetSeq(), "the agent's reply", isAnswer); err != nil {
		return err
	}
	d.say("The expiry actor expired the call and revived the agent with a timeout result (%s after the deadline); the agent told Alice.",
		millis(durationMillis(res.at.Sub(deadline))))
	resolution := res.ev.GetResolution()
	d.check("the deadline fired while the agent was dead, by the system", resolution.GetStatus() == messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED &&
		resolution.GetBy() == "system" && !res.at.Before(deadline),
		"resolution %s by %s", enumName(resolution.GetStatus().String(), "TOOL_CALL_STATUS_"), resolution.GetBy())
	outcome := result.ev.GetToolResult().GetOutcome().GetError()
	d.check("the model got a timeout result", outcome.GetCode() == "expired", "tool error %q: %s", outcome.GetCode(), outcome.GetMessage())
	if err := d.pause(ctx, 1); err != nil {
		return err
	}

	d.say("Now the manager clicks approve, too late.")
	before, err := d.history(ctx, convRefund)
	if err != nil {
		return err
	}
	err = d.rt.Resolve(ctx, id, `{"approved":true,"by":"mo"}`, manager)
	d.check("the late approval is refused as stale", errors.Is(err, journal.ErrStale), "Resolve: %v", err)
	if err != nil && !errors.Is(err, journal.ErrStale) {
		return err
	}
	after, err := d.history(ctx, convRefund)
	if err != nil {
		return err
	}
	row, err = d.rt.Store().ToolCall(ctx, id)
	if err != nil {
		return err
	}
	d.check("the late approval changed nothing", len(after) == len(before) && row.GetStatus() == messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED,
		"%d events before, %d after; the call is %s", len(before), len(after), enumName(row.GetStatus().String(), "TOOL_CALL_STATUS_"))
	return nil
}

// gapFree reports whether the seqs of evs run 1, 2, 3, ...
func gapFree(evs []*messages.Event) bool {
	for i, ev := range evs {
		if ev.GetSeq() != uint64(i+1) {
			return false
		}
	}
	return true
}
