package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// pacing is the demo's sense of time. Pauses are for a person reading the
// narration; the demo synchronises on events, never on time.
type pacing struct {
	beat    time.Duration // pause between steps
	think   time.Duration // how long the scripted model "thinks" per turn
	signoff time.Duration // deadline of manager_signoff (act 4)
	limit   time.Duration // bound of every wait: past it, the demo fails
}

// pacingFor returns the pacing of a run. With --fast, deadlines are short;
// with --fast, --quiet or --json nobody reads along, so nothing pauses.
func pacingFor(cfg config) pacing {
	p := pacing{signoff: 2 * time.Second, limit: 30 * time.Second}
	if cfg.fast {
		// Long enough for the kill to land first even on a loaded CI machine.
		p.signoff, p.limit = time.Second, 20*time.Second
	}
	if !cfg.fast && !cfg.quiet && !cfg.json {
		p.beat, p.think = 2*time.Second, 700*time.Millisecond
	}
	return p
}

// demo is one run of the story.
type demo struct {
	cfg     config
	pace    pacing
	dir     string
	out     *reporter
	stderr  io.Writer
	log     *slog.Logger
	started time.Time

	rt    *lazarus.Runtime // the runtime of the current act; nil between runtimes
	model *scripted.Model  // its model
	runs  *toolLog         // its server tool runs

	watchCtx    context.Context // ends rt's subscriptions
	watchCancel context.CancelFunc
	watchWG     sync.WaitGroup // the follow goroutines of rt
	watches     map[string]*feed[seen]

	revivals []revival

	// Carried from act to act.
	approvalID string // act 1's approve_refund call
	workspace  string // act 6's file root; empty before
}

// seen is a durable event as a subscriber received it.
type seen struct {
	ev *messages.Event
	at time.Time
}

// run plays the six acts and returns nil only if every check held.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) (err error) {
	d := &demo{cfg: cfg, pace: pacingFor(cfg), out: newReporter(stdout, cfg.json, cfg.quiet), stderr: stderr, started: time.Now()}
	d.log = newLogger(stderr, cfg.verbose)
	dir, temp, err := prepareDir(cfg.dir)
	if err != nil {
		return err
	}
	d.dir = dir
	defer func() {
		d.closeRuntime()
		leaveDir(ctx, cfg, dir, temp, err, stderr, d.log)
	}()
	d.out.header(dir, temp && !cfg.keep)
	err = d.play(ctx)
	if werr := d.out.result(err, ctx.Err() != nil); err == nil && werr != nil {
		err = fmt.Errorf("demo: write the transcript: %w", werr)
	}
	return err
}

func (d *demo) play(ctx context.Context) error {
	acts := []struct {
		title string
		play  func(context.Context) error
	}{
		{"A refund that needs a human", d.act1},
		{"The agent is killed; everything else carries on", d.act2},
		{"A human approves; the agent revives from its log", d.act3},
		{"Nobody answers; the deadline fires while the agent is dead", d.act4},
		{"kill -9: the whole process dies in the middle of a payment", d.act5},
		{"The agent edits files; a rewind puts them back", d.act6},
	}
	for i, a := range acts {
		n := i + 1
		d.out.beginAct(n, a.title)
		if err := a.play(ctx); err != nil {
			return fmt.Errorf("act %d: %w", n, err)
		}
		if c, failed := d.out.failedCheck(n); failed {
			return fmt.Errorf("act %d: %s: %s", n, c.Check, c.Detail)
		}
		if err := d.pause(ctx, 1); err != nil {
			return err
		}
	}
	s, err := d.summary(ctx)
	if err != nil {
		return err
	}
	d.out.summarize(s)
	return nil
}

func newLogger(w io.Writer, verbose bool) *slog.Logger {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// leaveDir leaves the demo's directory as its end says: a given one as it
// is; a temporary one kept on --keep, or after a failure (not an interrupt)
// for inspection, each said on stderr, else removed (a failed removal is
// logged).
func leaveDir(ctx context.Context, cfg config, dir string, temp bool, err error, stderr io.Writer, log *slog.Logger) {
	switch {
	case !temp:
	case cfg.keep:
		fmt.Fprintf(stderr, "demo: kept %s\n", dir)
	case err != nil && ctx.Err() == nil:
		fmt.Fprintf(stderr, "demo: kept %s for inspection\n", dir)
	default:
		if rerr := os.RemoveAll(dir); rerr != nil {
			log.Warn("could not remove the temporary directory", "dir", dir, "err", rerr)
		}
	}
}

// prepareDir returns the store's directory: dir, created if missing, or a
// new temporary directory (temp) when dir is empty. A given directory must
// not hold an earlier demo's conversations: the story starts from nothing.
// prepareDir claims it by creating the side file of tool runs exclusively,
// so of two demos started at once on the same empty directory one is
// refused. A directory that cannot be created, read or written in is a
// usageError, as is one that is not empty.
func prepareDir(dir string) (path string, temp bool, err error) {
	if dir == "" {
		path, err := os.MkdirTemp("", "lazarus-demo-")
		if err != nil {
			return "", false, fmt.Errorf("demo: create a temporary directory: %w", err)
		}
		return path, true, nil
	}
	cannot := func(err error) error {
		return usageError{fmt.Sprintf("--dir %s cannot be used: %v", dir, err)}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, cannot(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", false, cannot(err)
	}
	if len(entries) > 0 {
		return "", false, usageError{fmt.Sprintf("--dir %s is not empty: give a new or empty directory, the story starts from nothing", dir)}
	}
	beforeClaim(dir)
	f, err := os.OpenFile(filepath.Join(dir, runsFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	switch {
	case errors.Is(err, fs.ErrExist):
		return "", false, usageError{fmt.Sprintf("--dir %s is in use by another demo; give a new or empty directory", dir)}
	case err != nil:
		return "", false, cannot(err)
	}
	if err := f.Close(); err != nil {
		return "", false, cannot(err)
	}
	return dir, false, nil
}

// beforeClaim runs between prepareDir's emptiness check and its claim: a
// test stands another demo's claim there.
var beforeClaim = func(dir string) {}

// pause waits beats for the reader (not at all with --fast).
func (d *demo) pause(ctx context.Context, beats float64) error {
	if d.pace.beat <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(time.Duration(beats * float64(d.pace.beat)))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (d *demo) say(format string, args ...any) { d.out.say(format, args...) }

func (d *demo) check(name string, ok bool, format string, args ...any) bool {
	return d.out.check(name, ok, fmt.Sprintf(format, args...))
}

// bounded returns ctx bounded by the wait limit.
func (d *demo) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, d.pace.limit, fmt.Errorf("nothing happened within %v", d.pace.limit))
}

// openRuntime opens a Runtime on the demo's directory, with a new scripted
// model and tool log, and makes it the current one. script, if not nil,
// queues replies before the runtime starts (and may resume a turn).
func (d *demo) openRuntime(script func(*scripted.Model)) error {
	d.model = newModel(d.pace)
	if script != nil {
		script(d.model)
	}
	d.runs = newToolLog(processDemo, d.dir, d.out.toolRan)
	opts := lazarus.Options{
		Dir:    d.dir,
		Model:  d.model,
		Tools:  tools(d.pace, d.runs, false),
		Logger: d.log,
	}
	if d.workspace != "" {
		opts.Tools = append(opts.Tools, editFileTool(d.workspace, d.runs))
		opts.Files = lazarus.FilesOptions{Root: d.workspace}
	}
	rt, err := lazarus.Open(opts)
	if err != nil {
		return err
	}
	d.rt = rt
	d.watchCtx, d.watchCancel = context.WithCancel(context.Background())
	d.watches = map[string]*feed[seen]{}
	return nil
}

// closeRuntime closes the current Runtime, ending its subscriptions.
func (d *demo) closeRuntime() {
	if d.rt == nil {
		return
	}
	d.watchCancel()
	if err := d.rt.Close(); err != nil {
		d.log.Warn("closing the runtime failed", "err", err)
	}
	d.watchWG.Wait()
	d.rt, d.watches = nil, nil
}

// follow subscribes to conv after seq after: each durable event is printed
// as it arrives, then handed to whatever waits on the conversation. A failed
// turn fails the conversation's waiters.
func (d *demo) follow(conv string, after uint64) error {
	ch, err := d.rt.Subscribe(d.watchCtx, conv, after)
	if err != nil {
		return err
	}
	f := newFeed[seen]()
	d.watches[conv] = f
	d.watchWG.Add(1)
	go func() {
		defer d.watchWG.Done()
		defer f.end()
		for u := range ch {
			switch {
			case u.Event != nil:
				d.out.event(conv, u.Event, "")
				f.add(seen{ev: u.Event, at: time.Now()})
			case u.Err != nil:
				f.fail(fmt.Errorf("%s: %w", conv, u.Err))
			}
		}
	}()
	return nil
}

// await waits for the first event of conv after seq after that matches.
func (d *demo) await(ctx context.Context, conv string, after uint64, what string, match func(*messages.Event) bool) (seen, error) {
	f := d.watches[conv]
	if f == nil {
		return seen{}, fmt.Errorf("waiting for %s: %s is not followed", what, conv)
	}
	ctx, cancel := d.bounded(ctx)
	defer cancel()
	s, _, err := f.await(ctx, 0, what, func(s seen) bool { return s.ev.GetSeq() > after && match(s.ev) })
	return s, err
}

// history returns the whole log of conv.
func (d *demo) history(ctx context.Context, conv string) ([]*messages.Event, error) {
	return d.rt.History(ctx, conv, 0, 0)
}

func (d *demo) revived(act int, conv, trigger string, took time.Duration) {
	rv := revival{Act: act, Conversation: conv, Trigger: trigger, Millis: durationMillis(took)}
	d.revivals = append(d.revivals, rv)
	d.out.revived(rv)
}

// summary counts what the story wrote.
func (d *demo) summary(ctx context.Context) (summary, error) {
	s := summary{Revivals: d.revivals}
	store := d.rt.Store()
	cursor := ""
	for {
		convs, next, err := store.ListConversations(ctx, cursor, 100)
		if err != nil {
			return s, err
		}
		for _, c := range convs {
			last, err := store.LastSeq(ctx, c.GetId())
			if err != nil {
				return s, err
			}
			s.Conversations++
			s.Events += int(last)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	s.Checks, s.Failed = d.out.counts()
	s.ElapsedMillis = durationMillis(time.Since(d.started))
	return s, nil
}

// Matchers of events.

func isSuspension(ev *messages.Event) bool { return ev.GetSuspension() != nil }

// isAnswer matches an assistant message that calls no tool: the end of a turn.
func isAnswer(ev *messages.Event) bool {
	return ev.GetAssistantMsg() != nil && len(ev.GetAssistantMsg().GetToolCalls()) == 0
}

func isResolutionOf(id string) func(*messages.Event) bool {
	return func(ev *messages.Event) bool { return ev.GetResolution().GetToolCallId() == id && id != "" }
}

func isResultOf(id string) func(*messages.Event) bool {
	return func(ev *messages.Event) bool { return ev.GetToolResult().GetToolCallId() == id && id != "" }
}

// types lists the event types of a log, as the transcript names them, with
// the tool for tool events.
func types(evs []*messages.Event) []string {
	out := make([]string, 0, len(evs))
	for _, ev := range evs {
		rec := eventRecord("", ev)
		name := rec.Event
		switch rec.Event {
		case "tool_call", "tool_result":
			name += ":" + rec.Tool
		case "resolution":
			name += ":" + rec.Status
		}
		out = append(out, name)
	}
	return out
}

// pendingCall returns the only call a suspension waits on.
func pendingCall(ev *messages.Event) (*messages.PendingCall, error) {
	p := ev.GetSuspension().GetPending()
	if len(p) != 1 {
		return nil, fmt.Errorf("the suspension at #%d waits on %d calls, not 1", ev.GetSeq(), len(p))
	}
	return p[0], nil
}

// deadlineOf returns the scheduled deadline of a tool call, if any.
func deadlineOf(ctx context.Context, store journal.Store, toolCallID string) (time.Time, bool, error) {
	var at time.Time
	found := errors.New("found")
	err := store.Deadlines(ctx, time.Time{}, func(dl *messages.Deadline) error {
		if dl.GetToolCallId() == toolCallID {
			at = dl.GetAt().AsTime()
			return found
		}
		return nil
	})
	switch {
	case errors.Is(err, found):
		return at, true, nil
	case err != nil:
		return time.Time{}, false, err
	}
	return time.Time{}, false, nil
}
