package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/lazarusrt/lazarus/journal"
)

var schedulesCmd = &command{
	name:     "schedules",
	synopsis: "CONVERSATION_ID [--cancel SCHEDULE_ID]",
	summary:  "list a conversation's scheduled wake-ups, or cancel one",
	help: `
Lists the pending scheduled wake-ups of a conversation (Runtime.Schedule),
one a line: the schedule id, its next occurrence, how it repeats (every
INTERVAL, cron EXPR in ZONE, or once) and the text each occurrence sends;
exit 5 if there is no such conversation. With --cancel it removes that schedule instead (exit 5 if the conversation
has none of that id); a runtime running on the store finds it gone when
its timer fires, and sends nothing.`,
	run: (*cli).schedules,
}

func (c *cli) schedules(ctx context.Context, fs *flags, args []string) (err error) {
	cancelID := fs.String("cancel", "", "remove the schedule of this `id`")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	conv := pos[0]
	if err := journal.ValidateID("conversation id", conv); err != nil {
		return usagef("%v", err)
	}
	if isSet(fs, "cancel") {
		if err := journal.ValidateID("schedule id", *cancelID); err != nil {
			return usagef("--cancel: %v", err)
		}
	}
	st, _, err := c.openStore(fs, false)
	if err != nil {
		return err
	}
	defer closeStore(st, &err)
	ss, ok := st.(journal.ScheduleStore)
	if !ok {
		return fmt.Errorf("the store %T keeps no schedules: %w", st, errors.ErrUnsupported)
	}
	if _, err := st.Conversation(ctx, conv); err != nil {
		if noConversation(err) {
			return fmt.Errorf("no conversation %s: %w", displayID(conv), journal.ErrNotFound)
		}
		return err
	}
	if isSet(fs, "cancel") {
		if err := ss.DeleteSchedule(ctx, conv, *cancelID); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "%s (conversation %s) cancelled\n", displayID(*cancelID), displayID(conv))
		return nil
	}
	all, err := ss.ConversationSchedules(ctx, conv)
	if err != nil {
		return err
	}
	for _, sc := range all {
		repeat := "once"
		switch {
		case sc.GetEvery() != nil:
			repeat = "every " + sc.GetEvery().AsDuration().String()
		case sc.GetCron() != "":
			zone := sc.GetTimeZone()
			if zone == "" {
				zone = "UTC"
			}
			repeat = fmt.Sprintf("cron %q in %s", sc.GetCron(), zone)
		}
		var text strings.Builder
		for _, p := range sc.GetPayload().GetContent() {
			text.WriteString(p.GetText())
		}
		fmt.Fprintf(c.stdout, "%s\t%s\t%s\t%q\n", displayID(sc.GetId()), stamp(sc.GetNext()), repeat, text.String())
	}
	return nil
}
