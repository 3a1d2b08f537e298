package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
nothing: it opens the store read-only. A store of an older layout, which a
runtime upgrades when it opens it, is not upgraded: check says so and exits
1 (open it once with a runtime, or a lazarus command that writes, and check
again).

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
	dir, err := c.storeDir(fs)
	if err != nil {
		return err
	}
	rep, err := checkStore(ctx, dir) // read-only; damaged files: errDamaged
	if err != nil {
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
