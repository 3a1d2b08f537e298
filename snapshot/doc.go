// Package snapshot holds the pure logic of summaries as snapshots: the
// working set of a conversation rebuilt from (latest summary, events after
// it), what of it the model sees, which tool calls it still owes, where a
// summary may end, when to summarize (Policy), and the Summarizer that folds
// events into a summary.
//
// It does no I/O and starts no goroutines. The conversation actor reads the
// Store (journal LoadSince), calls Rebuild, and keeps the WorkingSet current
// with Append as its writes become durable. A WorkingSet is not safe for
// concurrent use: it belongs to the actor's goroutine. A Summarizer runs off
// that goroutine, on a Plan (copies of what it needs).
//
// # Rewinds
//
// A rewind event at seq r with ToSeq t moves the conversation's head back to
// t: events with t < seq < r are skipped by the working set (the log keeps
// them). The head is found by walking back from the newest event: a rewind
// jumps the walk to t, so a rewind inside a skipped span is itself skipped
// and has no effect. This is what makes rewinds nest and chain, and lets a
// later rewind undo an earlier one (rewinding to a seq after the earlier
// rewind brings back what it skipped). Events on the walk are "on the head";
// only they are rendered, can be open calls, or can end a summary.
//
// # Summaries
//
// A summary covers FromSeq..ToSeq and ends at a safe point (SafePoint): a
// seq on the head where every tool call issued so far (by an assistant
// message or a tool_call event) has its tool_result, so the model never sees
// a result whose call was summarized away, and the revived agent's open
// calls are all after the summary. A call an assistant message names whose
// tool_call event does not follow it (a damaged log) is owed nothing: it
// counts only up to the tool_call events right after that message.
package snapshot
