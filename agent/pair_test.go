package agent_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/messages"
)

func pairUser(seq uint64) *messages.Event {
	return &messages.Event{Seq: seq, Body: &messages.Event_UserMsg{UserMsg: agent.UserMessage(agent.TextPart("hi"))}}
}

func pairCalls(seq uint64, ids ...string) *messages.Event {
	a := agent.Reply("")
	for _, id := range ids {
		a.ToolCalls = append(a.ToolCalls, &messages.ToolCall{Id: id, Name: "pay", Arguments: `{}`})
	}
	return &messages.Event{Seq: seq, Agent: "ops", Audience: []string{"*"}, Body: &messages.Event_AssistantMsg{AssistantMsg: a}}
}

func pairResult(seq uint64, id, content string) *messages.Event {
	return &messages.Event{Seq: seq, Body: &messages.Event_ToolResult{ToolResult: &messages.ToolResultEvent{ToolCallId: id, Name: "pay",
		Outcome: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: content}}}}}
}

// pairing describes a context: "u" a user message, "a:x,y" an assistant
// message calling x and y, "r:x=v" a result for x (v its content, or
// "missing" for a CodeMissing error), each with its seq.
func pairing(evs []*messages.Event) []string {
	var out []string
	for _, ev := range evs {
		s := ""
		switch {
		case ev.GetUserMsg() != nil:
			s = "u"
		case ev.GetAssistantMsg() != nil:
			s = "a:"
			for i, tc := range ev.GetAssistantMsg().GetToolCalls() {
				if i > 0 {
					s += ","
				}
				s += tc.GetId()
			}
		case ev.GetToolResult() != nil:
			tr := ev.GetToolResult()
			v := tr.GetOutcome().GetContent()
			if e := tr.GetOutcome().GetError(); e != nil {
				v = e.GetCode()
			}
			s = "r:" + tr.GetToolCallId() + "=" + v
		}
		out = append(out, s+"@"+string(rune('0'+ev.GetSeq())))
	}
	return out
}

// TestPairResultsLeavesOutAnOrphan: a result whose call the context does
// not hold (rewound, summarized, never made), or whose call comes only
// after it, is not sent; the rest is as it was.
func TestPairResultsLeavesOutAnOrphan(t *testing.T) {
	in := []*messages.Event{pairUser(1), pairResult(2, "gone", "1"), pairCalls(3, "x"), pairResult(4, "x", "2"), pairResult(5, "later", "3"), pairCalls(6, "later"), pairResult(7, "later", "4")}
	got := agent.PairResults(in)
	require.Equal(t, []string{"u@1", "a:x@3", "r:x=2@4", "a:later@6", "r:later=4@7"}, pairing(got))
	require.Len(t, in, 7, "the context is not modified")
	require.Equal(t, "r:gone=1@2", pairing(in)[1])
}

// TestPairResultsKeepsTheFirstResultOfACall: of two results for one call,
// the first stands (the one that closes the call on the runtime's count);
// the second, wherever it is, is not sent.
func TestPairResultsKeepsTheFirstResultOfACall(t *testing.T) {
	in := []*messages.Event{pairUser(1), pairCalls(2, "x", "y"), pairResult(3, "x", "first"), pairResult(4, "y", "y"), pairResult(5, "x", "second"), pairUser(6), pairCalls(7), pairResult(8, "x", "third")}
	require.Equal(t, []string{"u@1", "a:x,y@2", "r:x=first@3", "r:y=y@4", "u@6", "a:@7"}, pairing(agent.PairResults(in)))
}

// TestPairResultsAnswersACallWithoutResult: a call the log holds with no
// result (nor tool_call event, so nothing owes it one) gets an error
// result the model reads, before the next assistant message, after the
// results and messages that follow its call, in the calls' order.
func TestPairResultsAnswersACallWithoutResult(t *testing.T) {
	in := []*messages.Event{pairUser(1), pairCalls(2, "x", "y", "z"), pairResult(3, "y", "ok"), pairUser(4), pairCalls(5, "w"), pairUser(6), pairCalls(7, "v")}
	got := agent.PairResults(in)
	require.Equal(t, []string{"u@1", "a:x,y,z@2", "r:y=ok@3", "u@4", "r:x=missing@4", "r:z=missing@4", "a:w@5", "u@6", "r:w=missing@6", "a:v@7", "r:v=missing@7"}, pairing(got))
	syn := got[4]
	require.Equal(t, "ops", syn.GetAgent(), "the agent of the call's message")
	require.Equal(t, []string{"*"}, syn.GetAudience())
	tr := syn.GetToolResult()
	require.Equal(t, "pay", tr.GetName())
	require.Equal(t, agent.CodeMissing, tr.GetOutcome().GetError().GetCode())
	require.Equal(t, "no result was recorded for this call", tr.GetOutcome().GetError().GetMessage())
	require.Equal(t, got, agent.PairResults(in), "deterministic")
}

// TestPairResultsSameSliceWhenPaired: a context already paired (a result
// may follow a message sent while its call was open) is returned as is.
func TestPairResultsSameSliceWhenPaired(t *testing.T) {
	in := []*messages.Event{pairUser(1), pairCalls(2, "x"), pairUser(3), pairResult(4, "x", "1"), pairUser(5)}
	got := agent.PairResults(in)
	require.Same(t, &in[0], &got[0])
	require.Nil(t, agent.PairResults(nil))

	byProvider := []*messages.Event{pairUser(1), {Seq: 2, Body: &messages.Event_AssistantMsg{AssistantMsg: agent.Reply("", &messages.ToolCall{ProviderId: "p1", Name: "pay"})}}, pairResult(3, "p1", "1")}
	got = agent.PairResults(byProvider)
	require.Same(t, &byProvider[0], &got[0], "a call without a runtime id is named by its provider's")
}

// TestPairResultsLeavesOutACallIdMadeTwice: a call whose id an earlier call
// already made is left out of its message (providers refuse a context
// holding one id twice), the message a copy and the log's untouched; a
// message left with neither content nor calls is left out. The results
// answer the first call. It was sent as it was, with no result of its
// own: a context every provider refuses (400), on every later turn.
func TestPairResultsLeavesOutACallIdMadeTwice(t *testing.T) {
	texted := pairCalls(6, "x", "z")
	texted.GetAssistantMsg().Content = agent.Text("again").GetContent()
	in := []*messages.Event{pairUser(1), pairCalls(2, "x"), pairResult(3, "x", "1"), pairCalls(4, "x"), pairUser(5), texted, pairResult(7, "z", "2"), pairCalls(8, "y", "y")}
	got := agent.PairResults(in)
	require.Equal(t, []string{"u@1", "a:x@2", "r:x=1@3", "u@5", "a:z@6", "r:z=2@7", "a:y@8", "r:y=missing@8"}, pairing(got))
	require.Equal(t, "again", got[4].GetAssistantMsg().GetContent()[0].GetText(), "its content stays")
	require.NotSame(t, texted, got[4], "a copy")
	require.Equal(t, "a:x,z@6", pairing(in)[5], "the context is not modified")
	require.Equal(t, "a:y,y@8", pairing(in)[7])
	require.Equal(t, got, agent.PairResults(in), "deterministic")

	// A result after the second call answers the first.
	late := []*messages.Event{pairUser(1), pairCalls(2, "x"), pairUser(3), pairCalls(4, "x"), pairResult(5, "x", "1")}
	require.Equal(t, []string{"u@1", "a:x@2", "u@3", "r:x=1@5"}, pairing(agent.PairResults(late)))
}
