package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/snapshot"
)

// errDamaged: check found damage, or the store's files are too damaged to
// open (exit status 6).
var errDamaged = errors.New("the store is damaged")

var checkCmd = &command{
	name:     "check",
	synopsis: "[--json]",
	summary:  "verify the whole store offline and report any damage",
	help: `
Reads every record of the store, a Pebble directory (--dir or $` + envDir + `;
a PostgreSQL store has no offline check, and $` + envPostgres + ` is not
read), and verifies it: every block's checksum, every record decodes and
agrees with its key, every conversation's log is
gap-free from seq 1, summaries lie inside their log and end where no tool
call is open (the runtime never writes one that ends inside a call: its
call issued at or before its end, its result after it or none yet; import
refuses one, and a revival passes it over), every tool_call event
has its row and owner entry, the pending index lists exactly the pending
rows, the active index exactly the conversations whose status is ACTIVE
(those Open resumes), and the two deadline indexes agree. It changes
nothing.

It prints what it read and one line per problem ("damage: ..."), or "sound".
Exit status: 0 sound, 6 damage found (or the store's files are too damaged
to open), 1 the check could not run, 2 usage, 4 the directory is held by
another process (stop the runtime first), 5 no store in the directory,
8 interrupted (SIGTERM or SIGINT; it stops at its next record), 7 forced
out by a second signal.
RELIABILITY.md says what to do with each kind of damage.`,
	run:     (*cli).check,
	dirOnly: true,
}

// checkOutput is check's --json document.
type checkOutput struct {
	Dir           string   `json:"dir"`
	Sound         bool     `json:"sound"`
	Conversations int      `json:"conversations"`
	Events        int      `json:"events"`
	ToolCalls     int      `json:"tool_calls"`
	Deadlines     int      `json:"deadlines"`
	Problems      []string `json:"problems"`
	More          int      `json:"more_problems,omitempty"`
}

func (c *cli) check(ctx context.Context, fs *flags, args []string) (err error) {
	fs.withJSON()
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	st, dir, err := c.openStore(fs, false) // damaged files: errDamaged
	if err != nil {
		return err
	}
	defer closeStore(st, &err)
	rep, err := checkStore(ctx, st)
	if err != nil {
		return err
	}
	if err := checkSummaryCuts(ctx, st, rep); err != nil {
		return err
	}
	out := checkOutput{
		Dir: dir, Sound: rep.Sound(), Conversations: rep.Conversations, Events: rep.Events,
		ToolCalls: rep.ToolCalls, Deadlines: rep.Deadlines, Problems: rep.Problems, More: rep.More,
	}
	if out.Problems == nil {
		out.Problems = []string{}
	}
	if *fs.json {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(c.stdout, "checked %s: %d conversations, %d events, %d tool calls, %d deadlines\n",
			dir, out.Conversations, out.Events, out.ToolCalls, out.Deadlines)
		for _, p := range out.Problems {
			fmt.Fprintf(c.stdout, "damage: %s\n", p)
		}
		if out.More > 0 {
			fmt.Fprintf(c.stdout, "damage: %d more problems not listed\n", out.More)
		}
		if out.Sound {
			fmt.Fprintln(c.stdout, "sound")
		}
	}
	if !out.Sound {
		return fmt.Errorf("%w: %d problems found (see RELIABILITY.md, \"Damaged stores\")", errDamaged, len(out.Problems)+out.More)
	}
	return nil
}

// checkSummaryCuts adds to rep a problem for each summary of the store's
// conversations that ends inside a tool call, as import decides it
// (snapshot.CallTracker): its call issued at or before the summary's end,
// its result after it or none yet. It reads the log of each conversation that has a
// summary, one page at a time, up to its latest summary's end. A read the
// store fails as damaged (journal.ErrCorrupt) is a problem too, naming the
// conversation; any other failure is the error.
func checkSummaryCuts(ctx context.Context, st journal.Store, rep *pebblejournal.CheckReport) error {
	for cursor := ""; ; {
		rows, next, err := st.ListConversations(ctx, cursor, 500)
		if err != nil {
			return err
		}
		for _, row := range rows {
			err := checkConversationCuts(ctx, st, row.GetId(), rep)
			if errors.Is(err, journal.ErrCorrupt) {
				rep.AddProblem(fmt.Sprintf("conversation %q: its summaries could not be checked for open tool calls: %v", row.GetId(), err))
				continue
			}
			if err != nil {
				return err
			}
		}
		if next == "" {
			return nil
		}
		cursor = next
	}
}

// checkConversationCuts is checkSummaryCuts for conversation id.
func checkConversationCuts(ctx context.Context, st journal.Store, id string, rep *pebblejournal.CheckReport) error {
	var sums []*messages.Summary // descending to_seq
	for sum, err := st.LatestSummary(ctx, id); ; sum, err = st.SummaryBefore(ctx, id, sum.GetToSeq()) {
		if errors.Is(err, journal.ErrNotFound) {
			break
		}
		if err != nil {
			return err
		}
		sums = append(sums, sum)
	}
	if len(sums) == 0 {
		return nil
	}
	slices.Reverse(sums)
	last := sums[len(sums)-1].GetToSeq()
	var open snapshot.CallTracker
	for after := uint64(0); after < last; {
		before := pageEnd(after, exportPage)
		if before == 0 || before > last+1 {
			before = last + 1
		}
		evs, err := st.Events(ctx, id, journal.EventQuery{After: after, Before: before})
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			break // a log shorter than a summary: Check reports it
		}
		for _, ev := range evs {
			open.Add(ev)
		}
		after = evs[len(evs)-1].GetSeq()
	}
	for _, sum := range sums {
		if calls := open.At(sum.GetToSeq()); len(calls) > 0 {
			rep.AddProblem(fmt.Sprintf("conversation %q: summary of seq %d..%d ends inside tool call %q, issued at seq %d and not answered by seq %d (a summary ends where no tool call is open; a revival passes it over)",
				id, sum.GetFromSeq(), sum.GetToSeq(), calls[0].ID, calls[0].Seq, sum.GetToSeq()))
		}
	}
	return nil
}
