package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/server"
)

var schedulesCmd = &command{
	name:     "schedules",
	synopsis: "CONVERSATION_ID [--cancel SCHEDULE_ID]",
	summary:  "list a conversation's scheduled wake-ups, or cancel one",
	help: `
Lists the pending scheduled wake-ups of a conversation (Runtime.Schedule),
one a line: the schedule id, its next occurrence, how it repeats (every
INTERVAL, cron EXPR in ZONE, or once) and the text each occurrence sends,
quoted (its text parts joined by newlines, as the node's API shows it);
exit 5 if there is no such conversation. With --cancel it removes that schedule instead (exit 5 if the conversation
has none of that id); a runtime running on the store finds it gone when
its timer fires, and sends nothing.

With --server it works on a live node instead (the store a running node
holds cannot be opened): it lists the schedules of GET
/v1/conversations/ID/schedules, every page, and cancels with DELETE
.../schedules/SCHEDULE_ID, as the token's user, printing what it prints
offline, with the same exit statuses.`,
	run:    (*cli).schedules,
	remote: true,
}

func (c *cli) schedules(ctx context.Context, fs *flags, args []string) (err error) {
	fs.withServer()
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
	rc, err := c.remote(fs)
	if err != nil {
		return err
	}
	if rc != nil {
		return c.remoteSchedules(ctx, rc, conv, cancelID)
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
			if errors.Is(err, journal.ErrNotFound) {
				return fmt.Errorf("no schedule %s in conversation %s: %w", displayID(*cancelID), displayID(conv), journal.ErrNotFound)
			}
			return err
		}
		c.printCancelled(*cancelID, conv)
		return nil
	}
	all, err := ss.ConversationSchedules(ctx, conv)
	if err != nil {
		return err
	}
	for _, sc := range all {
		var every time.Duration
		if sc.GetEvery() != nil {
			every = sc.GetEvery().AsDuration()
		}
		c.printSchedule(sc.GetId(), sc.GetNext(), every, sc.GetCron(), sc.GetTimeZone(), lazarus.ScheduleText(sc))
	}
	return nil
}

// remoteSchedules is schedules on a live node: it cancels the schedule
// cancelID names, if given, else lists every page of conv's schedules. A
// schedule the conversation does not have is the offline error, word for
// word.
func (c *cli) remoteSchedules(ctx context.Context, rc *remote, conv string, cancelID *string) error {
	base := pathID("/v1/conversations/", conv) + "/schedules"
	if *cancelID != "" {
		if err := rc.call(ctx, http.MethodDelete, base+"/"+url.PathEscape(*cancelID), nil, nil); err != nil {
			if !noConversation(err) {
				return fmt.Errorf("conversation %s, schedule %s: %w", displayID(conv), displayID(*cancelID), err)
			}
			// The node answers 404 for the conversation and for the
			// schedule alike: ask which, to say what offline says.
			if _, err := rc.conversation(ctx, conv); err != nil {
				return err
			}
			return fmt.Errorf("no schedule %s in conversation %s: %w", displayID(*cancelID), displayID(conv), journal.ErrNotFound)
		}
		c.printCancelled(*cancelID, conv)
		return nil
	}
	var all []server.Schedule
	// Pages are ordered by id, and a cursor is the id a page starts after.
	err := rc.eachPage("schedules", true, func(cursor string) (string, error) {
		path := base
		if cursor != "" {
			path += "?" + url.Values{"cursor": {cursor}}.Encode()
		}
		var page server.ScheduleList
		if err := rc.call(ctx, http.MethodGet, path, nil, &page); err != nil {
			if noConversation(err) {
				return "", fmt.Errorf("no conversation %s: %w", displayID(conv), err)
			}
			return "", err
		}
		all = append(all, page.Schedules...)
		return page.NextCursor, nil
	})
	if err != nil {
		return err
	}
	for _, sc := range all {
		var every time.Duration
		if sc.Every != "" {
			d, err := time.ParseDuration(sc.Every)
			if err != nil {
				return fmt.Errorf("node %s: schedule %s: bad every %q: %w", rc.base, displayID(sc.ID), sc.Every, err)
			}
			every = d
		}
		var next *timestamppb.Timestamp
		if sc.Next != nil {
			next = timestamppb.New(*sc.Next)
		}
		c.printSchedule(sc.ID, next, every, sc.Cron, sc.TimeZone, sc.Text)
	}
	return nil
}

func (c *cli) printCancelled(id, conv string) {
	fmt.Fprintf(c.stdout, "%s (conversation %s) cancelled\n", displayID(id), displayID(conv))
}

// printSchedule prints one schedule's line: its id, next occurrence, how
// it repeats (every, cron in a zone, UTC when none, or once) and its text.
func (c *cli) printSchedule(id string, next *timestamppb.Timestamp, every time.Duration, cron, zone, text string) {
	repeat := "once"
	switch {
	case every != 0:
		repeat = "every " + every.String()
	case cron != "":
		if zone == "" {
			zone = "UTC"
		}
		repeat = fmt.Sprintf("cron %q in %s", cron, zone)
	}
	fmt.Fprintf(c.stdout, "%s\t%s\t%s\t%q\n", displayID(id), stamp(next), repeat, text)
}
