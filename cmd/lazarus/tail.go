package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

var tailCmd = &command{
	name:     "tail",
	synopsis: "ID [--from SEQ] [--interval D] [--grace D] [--max N] [--full] [--json]",
	summary:  "follow a conversation's log: poll a directory no runtime holds or a PostgreSQL store, or a node's stream",
	help: `
Prints the conversation's latest events (the last 10, or those after
--from SEQ), then follows it: every --interval it opens the directory,
prints the events appended since, and closes it again. It stops on an
interrupt (exit 0), after --max events, or with an error.

How it follows, and why. Pebble lets one process open a directory at a
time, even read-only, so no second process can read the store while a
runtime writes it. tail therefore polls: it holds the directory only for
the few milliseconds of each open-read-close and never between polls, so
it can follow a directory that short-lived commands (resolve, import,
delete) change. A poll that finds the directory held waits for the next
one; if the directory stays held for --grace, a live runtime has it, and
tail stops with exit status 4 and says so (it cannot see what the runtime
writes, and must not keep racing the runtime for the lock: a runtime that
opens the directory in the instant of a poll fails its Open with
"directory is locked" and must retry). If the directory is held when tail
starts, it stops at once.

To follow a conversation that a live runtime runs, do it inside that
process: Runtime.Subscribe(ctx, id, afterSeq) streams every event after a
seq, history then live, with no gap and no duplicate.

With --postgres it polls the database the same way, every --interval;
PostgreSQL has no lock to wait on, so it follows a conversation a live
node on that database runs, and --grace does not apply.

With --json each event is printed as one protojson line (JSON lines).

With --server it follows the node's event stream (server-sent events)
instead of polling: each event is printed once durable, with no gap; the
stream is resumed from the last seq printed if the node ends it (a lagging
client), and tail stops with an error when the node goes away.
--interval and --grace do not apply.`,
	run:    (*cli).tail,
	remote: true,
}

// tailBacklog is how many existing events tail prints before following,
// when --from is not given.
const tailBacklog = 10

// tailPage bounds one read of a poll.
const tailPage = 512

func (c *cli) tail(ctx context.Context, fs *flags, args []string) error {
	fs.withJSON().withServer()
	fs.Lookup("json").Usage = "print each event as one protojson line (JSON lines) instead of text, for scripts"
	from := fs.Uint64("from", 0, "print the events after this `seq` first (default: the last 10)")
	interval := fs.Duration("interval", time.Second, "how often to poll the store (the directory or the PostgreSQL database; not with --server)")
	grace := fs.Duration("grace", 5*time.Second, "with a directory: give up once another process has held it this long (not with --postgres or --server)")
	maxEvents := fs.Int("max", 0, "stop after printing this many events; 0 means follow until interrupted")
	full := fs.Bool("full", false, "do not clip texts and JSON")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *interval <= 0 {
		return usagef("--interval must be positive")
	}
	if *grace < 0 {
		return usagef("--grace must not be negative")
	}
	if *maxEvents < 0 {
		return usagef("--max must not be negative")
	}
	id := pos[0]
	if err := journal.ValidateID("conversation id", id); err != nil {
		return usagef("%v", err)
	}
	t := &tailer{c: c, fs: fs, id: id, full: *full, json: *fs.json, max: *maxEvents}
	if isSet(fs, "from") {
		t.after = *from
	} else {
		t.backlog = true
	}
	rc, err := c.remote(fs)
	if err != nil {
		return err
	}
	if rc != nil {
		return t.follow(ctx, rc)
	}
	err = t.poll(ctx)
	switch {
	case ctx.Err() != nil:
		return nil // interrupted during the first poll: a clean stop too
	case err != nil || t.done():
		return err
	}
	timer := time.NewTimer(*interval)
	defer timer.Stop()
	var busySince time.Time // when the current run of busy polls began
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		err := t.poll(ctx)
		switch {
		case ctx.Err() != nil:
			return nil // interrupted mid-poll
		case errors.Is(err, errBusy):
			// Wall-clock time on purpose: the grace is about real processes.
			if busySince.IsZero() {
				busySince = time.Now()
			}
			if time.Since(busySince) >= *grace {
				return fmt.Errorf("held for %s or more: %w", *grace, err)
			}
		case err != nil:
			return err
		default:
			busySince = time.Time{}
		}
		if t.done() {
			return nil
		}
		timer.Reset(*interval)
	}
}

// tailer is the state of one tail: the last seq printed.
type tailer struct {
	c       *cli
	fs      *flags
	id      string
	full    bool
	json    bool
	max     int
	after   uint64 // last seq printed (or asked to start after)
	logEnd  uint64 // the last seq the log is known to have reached (--server)
	backlog bool   // the first poll starts tailBacklog events before the end
	printed int
}

func (t *tailer) done() bool { return t.max > 0 && t.printed >= t.max }

// testHookTailPage, if set (by tests only, before the command runs), is
// called by a poll with its context after each page of events it printed.
var testHookTailPage func(ctx context.Context)

// poll opens the store, prints what was appended since the last poll and
// closes it.
func (t *tailer) poll(ctx context.Context) (err error) {
	st, _, err := t.c.openStore(t.fs, false)
	if err != nil {
		if errors.Is(err, errBusy) {
			return fmt.Errorf("cannot follow %s: %w (use Runtime.Subscribe in the runtime's process)", displayID(t.id), err)
		}
		return err
	}
	defer closeStore(st, &err)
	if _, err := st.Conversation(ctx, t.id); err != nil {
		if noConversation(err) {
			return fmt.Errorf("no conversation %s (never written, or deleted): %w", displayID(t.id), journal.ErrNotFound)
		}
		return err
	}
	if t.backlog {
		t.backlog = false
		last, err := st.LastSeq(ctx, t.id)
		if err != nil {
			return err
		}
		t.after = last - min(last, tailBacklog)
	}
	for !t.done() {
		evs, err := st.Events(ctx, t.id, journal.EventQuery{After: t.after, Before: pageEnd(t.after, tailPage)})
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			return nil
		}
		for _, ev := range evs {
			if err := t.print(ev); err != nil {
				return err
			}
			t.after = ev.GetSeq()
			t.printed++
			if t.done() {
				return nil
			}
		}
		if testHookTailPage != nil {
			testHookTailPage(ctx)
		}
	}
	return nil
}

func (t *tailer) print(ev *messages.Event) error {
	if !t.json {
		_, err := fmt.Fprintln(t.c.stdout, eventLine(ev, t.full))
		return err
	}
	b, err := protoJSON(ev)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(t.c.stdout, "%s\n", b)
	return err
}

// pageEnd is the exclusive upper bound of a forward page of n seqs after
// after (0, no bound, if it would overflow).
func pageEnd(after uint64, n uint64) uint64 {
	if after > ^uint64(0)-n-1 {
		return 0
	}
	return after + n + 1
}

// maxSSELine bounds one line of an event stream: an event of
// journal.MaxEventBytes as escaped JSON.
const maxSSELine = 8 << 20

// errStreamEnded: the node ended an event stream without an error message
// (it is shutting down, or a proxy cut it).
var errStreamEnded = errors.New("the node ended the event stream")

// follow is tail on a live node: it prints the backlog, then follows the
// conversation's event stream. A stream the node ends as lagged, or cuts,
// is resumed from the last seq printed; one that cannot be reopened ends
// tail with the error.
func (t *tailer) follow(ctx context.Context, rc *remote) error {
	_, err := rc.conversation(ctx, t.id)
	var last uint64
	if err == nil {
		last, err = rc.lastSeq(ctx, t.id)
	}
	switch {
	case ctx.Err() != nil:
		return nil // interrupted before the stream: a clean stop too
	case err != nil:
		return err
	}
	t.logEnd = last
	if t.backlog {
		t.after = last - min(last, tailBacklog)
	}
	idle := 0 // streams in a row that ended with nothing printed
	for {
		before := t.printed
		err := t.stream(ctx, rc)
		switch {
		case ctx.Err() != nil || t.done():
			return nil
		case errors.Is(err, errLagged):
			// Resume from t.after.
		case errors.Is(err, errStreamEnded):
			if t.printed == before {
				idle++
			} else {
				idle = 0
			}
			if idle > maxIdleStreams {
				return err
			}
		default:
			return err
		}
	}
}

// maxIdleStreams is how many streams in a row may end with nothing
// printed before tail gives up on the node.
const maxIdleStreams = 3

// errLagged: the node ended the stream because tail fell behind.
var errLagged = errors.New("lagged")

// stream reads one connection of the event stream after t.after, or
// after the log's end while --from is past it (the node refuses a stream
// that starts past the log's end; message skips what is not after t.after).
func (t *tailer) stream(ctx context.Context, rc *remote) error {
	h := http.Header{}
	h.Set("Accept", "text/event-stream")
	h.Set("Last-Event-ID", strconv.FormatUint(min(t.after, t.logEnd), 10))
	resp, err := rc.request(ctx, http.MethodGet, pathID("/v1/conversations/", t.id)+"/stream", nil, h)
	if err != nil {
		if noConversation(err) {
			return fmt.Errorf("no conversation %s (never written, or deleted): %w", displayID(t.id), err)
		}
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxSSELine)
	var name string
	var data strings.Builder
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if err := t.message(name, data.String()); err != nil || t.done() {
				return err
			}
			name = ""
			data.Reset()
		case strings.HasPrefix(line, ":"): // a comment: keep-alive
		case strings.HasPrefix(line, "event:"):
			name = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("reading the event stream: %w", err)
	}
	return errStreamEnded
}

// message handles one server-sent message: an event is printed (once:
// those at or before t.after are skipped), an error ends the stream; the
// others (deltas, turn ends, retries) are not part of the log and are not
// printed, as offline.
func (t *tailer) message(name, data string) error {
	switch name {
	case "event":
		ev := &messages.Event{}
		if err := unmarshalEvent.Unmarshal([]byte(data), ev); err != nil {
			return fmt.Errorf("a bad event from the node: %w", err)
		}
		t.logEnd = max(t.logEnd, ev.GetSeq())
		if ev.GetSeq() <= t.after {
			return nil
		}
		if err := t.print(ev); err != nil {
			return err
		}
		t.after = ev.GetSeq()
		t.printed++
	case "error":
		var eb struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &eb); err != nil {
			return fmt.Errorf("a bad error message from the node: %w", err)
		}
		if eb.Error.Code == server.CodeLagged {
			return errLagged
		}
		return &apiError{status: http.StatusOK, code: eb.Error.Code, msg: eb.Error.Message}
	}
	return nil
}
