package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/anthropic"
	"github.com/lazarusrt/lazarus/agent/openai"
	"github.com/lazarusrt/lazarus/messages"
)

// liveModel returns the real model --model names, configured from the
// environment (see the providers' OptionsFromEnv).
func liveModel(name string) (agent.Model, error) {
	switch name {
	case "openai":
		return openai.New(openai.OptionsFromEnv())
	case "anthropic":
		return anthropic.New(anthropic.OptionsFromEnv())
	}
	return nil, fmt.Errorf("demo: unknown --model %q (scripted, openai or anthropic)", name)
}

const liveConv = "live-1"

// runLive is the demo against a real model: a question whose streamed answer
// is cut by a kill of the conversation's actor (after its first delta), the
// revival re-running the turn, then the whole runtime closed and reopened on
// the same store and asked about the first answer. It checks that the log
// holds exactly one answer per question. Its --dir is held to the rules of
// the scripted demo's (prepareDir), and its temporary directory is kept as
// that demo keeps its own: with --keep, or after a failure. Its output
// follows the scripted demo's flags: --json writes the same records (act,
// step, event, check, summary, result; no tool_run or revival: the live
// demo has neither), --quiet one line (or the reason of a failure), and
// --verbose the runtime's debug logs on stderr. --fast is refused by
// parseFlags: the live demo has no pauses, and its pace is the model's.
func runLive(ctx context.Context, cfg config, stdout, stderr io.Writer) (err error) {
	model, err := liveModel(cfg.model)
	if err != nil {
		return err
	}
	dir, temp, err := prepareDir(cfg.dir)
	if err != nil {
		return err
	}
	log := newLogger(stderr, cfg.verbose)
	defer func() { leaveDir(ctx, cfg, dir, temp, err, stderr, log) }()
	l := &liveOut{w: stdout, text: !cfg.json && !cfg.quiet, started: time.Now()}
	if cfg.json {
		l.rec = newReporter(stdout, true, cfg.quiet)
		defer func() {
			if werr := l.rec.result(err, ctx.Err() != nil); err == nil && werr != nil {
				err = fmt.Errorf("demo: write the transcript: %w", werr)
			}
		}()
	}
	l.printf("Lazarus live demo: model %s, store %s\n\n", cfg.model, dir)

	l.act(1, "A streamed answer is killed mid-stream; the revival re-runs the turn")
	rt, err := lazarus.Open(lazarus.Options{Dir: dir, Model: model, Logger: log})
	if err != nil {
		return err
	}
	q1 := "In three sentences, tell a story about a cat that has nine lives."
	killed := false
	_, err = l.ask(ctx, rt, q1, func(delta string) bool {
		if !killed {
			killed = true
			l.printf("\n   [kill: the conversation's actor dies mid-stream; its partial answer is dropped]\n   [wake: revived from the log, the turn re-runs]\n   ")
			l.step("kill: the conversation's actor dies mid-stream; its partial answer is dropped")
			rt.Kill(liveConv)
			if err := rt.Wake(ctx, liveConv); err != nil {
				l.printf("wake failed: %v\n", err)
				l.step("wake failed: %v", err)
			} else {
				l.step("wake: revived from the log, the turn re-runs")
			}
			return true
		}
		return false
	})
	if err != nil {
		_ = rt.Close()
		return err
	}
	if !killed {
		l.printf("   (the model streamed no text: nothing to kill mid-stream)\n")
		l.step("the model streamed no text: nothing to kill mid-stream")
	}
	if err := rt.Close(); err != nil {
		return err
	}
	l.act(2, "The runtime restarts; the conversation goes on")
	l.printf("[restart: the runtime is closed and opened again on %s]\n", dir)
	l.step("restart: the runtime is closed and opened again on %s", dir)
	if rt, err = lazarus.Open(lazarus.Options{Dir: dir, Model: model, Logger: log}); err != nil {
		return err
	}
	defer rt.Close()
	if _, err := l.ask(ctx, rt, "In one sentence: what did you just tell me about?", nil); err != nil {
		return err
	}
	hist, err := rt.History(ctx, liveConv, 0, 100)
	if err != nil {
		return err
	}
	var users, answers int
	for _, ev := range hist {
		switch {
		case ev.GetUserMsg() != nil:
			users++
		case ev.GetAssistantMsg() != nil:
			answers++
		}
	}
	l.printf("\ncheck: the log holds %d questions and %d answers (the killed call left none)\n", users, answers)
	ok := users == 2 && answers == 2
	l.check("the log holds one answer per question", ok, "%d questions and %d answers (the killed call left none)", users, answers)
	if !ok {
		return fmt.Errorf("demo: the log holds %d questions and %d answers, want 2 and 2", users, answers)
	}
	elapsed := time.Since(l.started)
	if l.rec != nil {
		checks, failed := l.rec.counts()
		l.rec.summarize(summary{Events: len(hist), Conversations: 1, Revivals: []revival{}, Checks: checks, Failed: failed, ElapsedMillis: durationMillis(elapsed)})
	} else if cfg.quiet {
		cut := "the answer was killed mid-stream and re-run"
		if !killed {
			cut = "the model streamed no text to kill"
		}
		if _, werr := fmt.Fprintf(stdout, "demo: live demo on %s: 1 check passed; %d events, %d questions and %d answers; %s; %s\n",
			cfg.model, len(hist), users, answers, cut, seconds(durationMillis(elapsed))); werr != nil {
			return fmt.Errorf("demo: write the transcript: %w", werr)
		}
	}
	return nil
}

// liveOut is the live demo's output: its text for a reader (text), or the
// scripted demo's JSON records (rec, with --json), or nothing until the
// one line of --quiet.
type liveOut struct {
	w       io.Writer
	text    bool      // neither --json nor --quiet
	rec     *reporter // --json; nil otherwise
	started time.Time
}

// printf writes text for a reader, in text mode only.
func (l *liveOut) printf(format string, args ...any) {
	if l.text {
		fmt.Fprintf(l.w, format, args...)
	}
}

// act begins act n: a record with --json, its title in text mode.
func (l *liveOut) act(n int, title string) {
	if l.rec != nil {
		l.rec.beginAct(n, title)
	}
	l.printf("Act %d. %s\n", n, title)
}

// step is a "step" record (narration) with --json.
func (l *liveOut) step(format string, args ...any) {
	if l.rec != nil {
		l.rec.say(format, args...)
	}
}

// event is an "event" record with --json.
func (l *liveOut) event(ev *messages.Event) {
	if l.rec != nil {
		l.rec.event(liveConv, ev, "")
	}
}

// check is a "check" record with --json. In text mode runLive prints the
// check itself; a failed check fails the run, whose reason cli says.
func (l *liveOut) check(name string, ok bool, format string, args ...any) {
	if l.rec != nil {
		l.rec.check(name, ok, fmt.Sprintf(format, args...))
	}
}

// ask sends q and shows the streamed answer until the assistant message is
// durable (see show).
func (l *liveOut) ask(ctx context.Context, rt *lazarus.Runtime, q string, onDelta func(string) bool) (*messages.AssistantMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	seq, err := rt.Send(ctx, liveConv, q, agent.Scope{UserID: "demo"})
	if err != nil {
		return nil, err
	}
	// From the question on: its event is the first update.
	updates, err := rt.Subscribe(ctx, liveConv, seq-1)
	if err != nil {
		return nil, err
	}
	l.printf("user> %s\nmodel> ", q)
	a, err := l.show(updates, onDelta)
	if err == nil && a == nil {
		if err = ctx.Err(); err == nil {
			err = errors.New("demo: the subscription ended before an answer")
		}
	}
	return a, err
}

// show prints the streamed answer of updates until its assistant message
// is durable, and returns it (nil if updates ends first). onDelta (may be
// nil) sees each delta first; true says it abandoned the model call that
// streams them (the kill, which it narrates): the deltas that follow, the
// rest of that call's, are not shown, and the Restart that voids them
// (Update.Restart) ends that. A Restart also marks void the text shown
// since the last event (a model call abandoned otherwise: a retry, say),
// so that a call's leftover text never reads as part of the answer that
// follows. An answer none of whose text was shown since the kill or the
// last Restart (the killed call's, written before the kill stopped it, or
// one that streamed no text) is shown whole when it is durable. A model
// call's retry (Update.Retry) is shown as such, not as the turn's failure.
func (l *liveOut) show(updates <-chan lazarus.Update, onDelta func(string) bool) (*messages.AssistantMessage, error) {
	abandoned := false // onDelta abandoned the call whose deltas come until the next Restart
	shown := 0         // bytes of streamed text shown since the last event
	for u := range updates {
		if u.Restart {
			abandoned = false
			if shown > 0 {
				l.printf("\n   [void: the call that streamed the text above was abandoned; the answer starts again]\n   ")
				shown = 0
			}
		}
		if u.Event != nil && u.Event.GetAssistantMsg() == nil {
			abandoned, shown = false, 0
		}
		switch {
		case u.Retry != nil:
			// A model call failed and is made again: the turn goes on.
			l.printf("\n   [the model call failed (attempt %d: %v); the runtime tries again in %s]\n   ",
				u.Retry.Attempt, u.Err, u.Retry.Delay)
		case u.Err != nil:
			return nil, fmt.Errorf("demo: the turn failed: %w", u.Err)
		case u.Delta != "":
			if abandoned {
				continue
			}
			l.printf("%s", u.Delta)
			shown += len(u.Delta)
			if onDelta != nil && onDelta(u.Delta) {
				abandoned, shown = true, 0
			}
		case u.Event.GetUserMsg() != nil:
			l.event(u.Event)
		case u.Event.GetAssistantMsg() != nil:
			l.event(u.Event)
			a := u.Event.GetAssistantMsg()
			var text strings.Builder
			for _, p := range a.GetContent() {
				text.WriteString(p.GetText())
			}
			if shown == 0 {
				// None of it shown since the kill or the last Restart:
				// the call wrote its answer before the kill stopped it,
				// or streamed no text.
				l.printf("%s", text.String())
			}
			l.printf("\n   [durable at seq %d: %d characters, model %s, %d+%d tokens]\n\n",
				u.Event.GetSeq(), text.Len(), a.GetModel(), a.GetUsage().GetInputTokens(), a.GetUsage().GetOutputTokens())
			return a, nil
		}
	}
	return nil, nil
}
