package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

var deleteCmd = &command{
	name:     "delete",
	synopsis: "ID --yes",
	summary:  "delete a conversation and everything it owns (needs --yes)",
	help: `
Deletes the conversation in one atomic write: its events, summaries, tool
call rows, deadlines, audit rows, metadata and row. The id is then
tombstoned: nothing (no runtime, no import) can ever write it again.

Without --yes it only says what it would delete, and exits with status 2.
An id with metadata, events or pending calls but no conversation row
(metadata left by a failed create, say) is deleted the same way; an id
with none of them is not found.
The events counted are those its log holds (a fork's starts after the
summary it copied).
Export the conversation first if you may want it back (under the same id
it cannot come back; see 'lazarus import --help').

With --server the node deletes it (Runtime.Delete: its live actor is
stopped first); the pending calls counted are the human ones.`,
	run:    (*cli).delete,
	remote: true,
}

func (c *cli) delete(ctx context.Context, fs *flags, args []string) (err error) {
	fs.withServer()
	yes := fs.Bool("yes", false, "really delete")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	id := pos[0]
	if err := journal.ValidateID("conversation id", id); err != nil {
		return usagef("%v", err)
	}
	rc, err := c.remote(fs)
	if err != nil {
		return err
	}
	if rc != nil {
		return c.deleteRemote(ctx, rc, id, *yes)
	}
	st, _, err := c.openStore(fs, false)
	if err != nil {
		return err
	}
	defer closeStore(st, &err)
	row, err := st.Conversation(ctx, id)
	switch {
	case errors.Is(err, journal.ErrNotFound) && !errors.Is(err, journal.ErrDeleted):
		// No row, but records may be stored under the id (metadata, say):
		// the Store deletes them too, and says ErrNotFound if there are none.
		row = nil
	case err != nil:
		if noConversation(err) {
			return fmt.Errorf("no conversation %s: %w", displayID(id), journal.ErrNotFound)
		}
		return err
	}
	held, err := storedEvents(ctx, st, id)
	if err != nil {
		return err
	}
	pending, err := st.PendingToolCalls(ctx, id)
	if err != nil {
		return err
	}
	what := fmt.Sprintf("conversation %s (%s, %d events, %d pending calls)", displayID(id), statusName(row.GetStatus()), held, len(pending))
	if row == nil {
		md, err := st.Metadata(ctx, id)
		if err != nil && !noConversation(err) {
			return err
		}
		if len(md) == 0 && held == 0 && len(pending) == 0 {
			return fmt.Errorf("no conversation %s: %w", displayID(id), journal.ErrNotFound)
		}
		what = fmt.Sprintf("the records stored under %s (no conversation row, %d metadata keys, %d events, %d pending calls)", displayID(id), len(md), held, len(pending))
	}
	if !*yes {
		fmt.Fprintf(c.stdout, "would delete %s\n", what)
		return usagef("refusing to delete without --yes")
	}
	if err := st.DeleteConversation(ctx, id); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "deleted %s\n", what)
	return nil
}

// deleteRemote is delete on a live node.
func (c *cli) deleteRemote(ctx context.Context, rc *remote, id string, yes bool) error {
	cv, err := rc.conversation(ctx, id)
	if err != nil {
		return err
	}
	held, err := rc.storedEvents(ctx, id)
	if err != nil {
		return err
	}
	calls, err := rc.pendingCalls(ctx)
	if err != nil {
		return err
	}
	pending := 0
	for _, call := range calls {
		if call.ConversationID == id {
			pending++
		}
	}
	what := fmt.Sprintf("conversation %s (%s, %d events, %d pending calls)", displayID(id), statusName(statusOf(cv.Status)), held, pending)
	if !yes {
		fmt.Fprintf(c.stdout, "would delete %s\n", what)
		return usagef("refusing to delete without --yes")
	}
	if err := rc.call(ctx, http.MethodDelete, pathID("/v1/conversations/", id), nil, nil); err != nil {
		if noConversation(err) {
			return fmt.Errorf("no conversation %s: %w", displayID(id), err)
		}
		return err
	}
	fmt.Fprintf(c.stdout, "deleted %s\n", what)
	return nil
}

var gcAuditCmd = &command{
	name:     "gc-audit",
	synopsis: "--older-than DURATION [--conversation ID] [--dry-run]",
	summary:  "delete model-call audit rows older than a duration",
	help: `
Deletes the model-call audit rows (what was rendered to the model on each
turn, recorded when the runtime runs with Audit.Enabled) created more than
--older-than ago (a Go duration: 720h, 90m), in every conversation or in
one. --dry-run counts them instead. A runtime with Audit.TTL does the same
on its own; this is for a directory no runtime is running on.`,
	run: (*cli).gcAudit,
}

func (c *cli) gcAudit(ctx context.Context, fs *flags, args []string) (err error) {
	olderThan := fs.Duration("older-than", 0, "delete rows created more than this `duration` ago (required)")
	conv := fs.String("conversation", "", "only this conversation (`id`)")
	dryRun := fs.Bool("dry-run", false, "count the rows that would be deleted; delete nothing")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	if !isSet(fs, "older-than") {
		return usagef("--older-than is required")
	}
	if *olderThan < 0 {
		return usagef("--older-than must not be negative")
	}
	if isSet(fs, "conversation") {
		if err := journal.ValidateID("conversation id", *conv); err != nil {
			return usagef("%v", err)
		}
	}
	st, _, err := c.openStore(fs, false)
	if err != nil {
		return err
	}
	defer closeStore(st, &err)
	cutoff := c.now().Add(-*olderThan)
	total, convs := 0, 0
	gc := func(id string) error {
		var n int
		if *dryRun {
			rows, err := st.ModelCalls(ctx, id)
			if err != nil {
				return err
			}
			for _, mc := range rows {
				// The rule of Audit.GCModelCalls.
				if mc.GetCreated() == nil || mc.GetCreated().AsTime().Before(cutoff) {
					n++
				}
			}
		} else if n, err = st.GCModelCalls(ctx, id, cutoff); err != nil {
			return err
		}
		total += n
		if n > 0 {
			convs++
		}
		return nil
	}
	if isSet(fs, "conversation") {
		if _, err := st.Conversation(ctx, *conv); err != nil {
			if noConversation(err) {
				return fmt.Errorf("no conversation %s: %w", displayID(*conv), journal.ErrNotFound)
			}
			return err
		}
		err = gc(*conv)
	} else {
		err = eachConversation(ctx, st, func(row *messages.Conversation) error { return gc(row.GetId()) })
	}
	if err != nil {
		if total > 0 && !*dryRun {
			// Each conversation's rows go in one write: the others keep
			// theirs, and a run again deletes them.
			return fmt.Errorf("stopped after deleting %d audit rows in %d conversations: %w", total, convs, err)
		}
		return err
	}
	verb := "deleted"
	if *dryRun {
		verb = "would delete"
	}
	fmt.Fprintf(c.stdout, "%s %d audit rows older than %s (created before %s) in %d conversations\n",
		verb, total, *olderThan, cutoff.UTC().Format("2006-01-02T15:04:05Z"), convs)
	return nil
}
