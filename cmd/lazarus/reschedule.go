package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

var rescheduleCmd = &command{
	name:     "reschedule",
	synopsis: "TOOL_CALL_ID (--at TIME | --in DURATION | --never)",
	summary:  "move the deadline of a pending human tool call (prints stale, exit 3, when too late)",
	help: `
Replaces the deadline of a pending human tool call: --at an RFC 3339 time,
--in a duration from now (a negative one is in the past: the call expires
as soon as a runtime opens the directory), or --never (the call waits for
an answer forever). It is the same write as Runtime.Reschedule: one durable
write changes the call's row and its deadline record together, only if the
call is still pending. If it is not (the id is unknown, the call was
answered, or it expired), nothing changes, the command prints "stale" and
exits with status 3.

A runtime that next opens the directory arms the new deadline. Only human
calls have deadlines.`,
	run: (*cli).reschedule,
}

func (c *cli) reschedule(ctx context.Context, fs *flags, args []string) (err error) {
	atText := fs.String("at", "", "the new deadline, an RFC 3339 `time` (2026-11-03T17:00:00Z)")
	in := fs.Duration("in", 0, "the new deadline, this `duration` from now (48h)")
	never := fs.Bool("never", false, "remove the deadline: the call never expires")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	id := pos[0]
	if err := journal.ValidateID("tool call id", id); err != nil {
		return usagef("%v", err)
	}
	given := 0
	for _, name := range []string{"at", "in", "never"} {
		if isSet(fs, name) {
			given++
		}
	}
	if given != 1 {
		return usagef("give exactly one of --at, --in and --never")
	}
	// stampAt stays nil for --never only: an --at of the first instant of
	// year 1 (Go's zero time, which journal.Timestamp reads as no time) is
	// a time in the past like any other.
	var at time.Time
	var stampAt *timestamppb.Timestamp
	switch {
	case isSet(fs, "at"):
		if at, err = time.Parse(time.RFC3339Nano, *atText); err != nil {
			return usagef("--at is not an RFC 3339 time: %v", err)
		}
		stampAt = timestamppb.New(at)
	case isSet(fs, "in"):
		at = c.now().Add(*in)
		stampAt = timestamppb.New(at)
	case !*never:
		return usagef("--never takes no value other than true")
	}
	if stampAt != nil {
		if err := stampAt.CheckValid(); err != nil {
			return usagef("the deadline %v cannot be stored: %v", at, err)
		}
	}
	st, _, err := c.openStore(fs, false)
	if err != nil {
		return err
	}
	defer closeStore(st, &err)
	row, err := c.pendingHumanCall(ctx, st, id, "it has no deadline; only human calls are rescheduled")
	if err != nil {
		return err
	}
	conv := row.GetConversationId()
	// What Runtime.Reschedule writes: an unfenced append of one reschedule.
	req := &messages.AppendRequest{ConversationId: conv, Unfenced: true, Reschedule: []*messages.Deadline{{
		ConversationId: conv, ToolCallId: id, At: stampAt,
	}}}
	if _, err := st.Append(ctx, req); err != nil {
		if errors.Is(err, journal.ErrStale) || errors.Is(err, journal.ErrDeleted) {
			return c.stale(fmt.Errorf("tool call %s: %w", displayID(id), err))
		}
		return err
	}
	if stampAt == nil {
		fmt.Fprintf(c.stdout, "%s (conversation %s) now never expires\n", displayID(id), displayID(conv))
		return nil
	}
	fmt.Fprintf(c.stdout, "%s (conversation %s) now expires at %s\n", displayID(id), displayID(conv), stamp(stampAt))
	return nil
}
