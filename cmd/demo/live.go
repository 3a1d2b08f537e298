package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
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
// that demo keeps its own: with --keep, or after a failure.
func runLive(ctx context.Context, cfg config, stdout, stderr io.Writer) (err error) {
	model, err := liveModel(cfg.model)
	if err != nil {
		return err
	}
	dir, temp, err := prepareDir(cfg.dir)
	if err != nil {
		return err
	}
	defer func() {
		switch {
		case !temp:
		case cfg.keep:
			fmt.Fprintf(stderr, "demo: kept %s\n", dir)
		case err != nil && ctx.Err() == nil:
			fmt.Fprintf(stderr, "demo: kept %s for inspection\n", dir)
		default:
			_ = os.RemoveAll(dir)
		}
	}()
	fmt.Fprintf(stdout, "Lazarus live demo: model %s, store %s\n\n", cfg.model, dir)

	rt, err := lazarus.Open(lazarus.Options{Dir: dir, Model: model})
	if err != nil {
		return err
	}
	q1 := "In three sentences, tell a story about a cat that has nine lives."
	killed := false
	answer, err := ask(ctx, rt, q1, stdout, func(delta string) {
		if !killed {
			killed = true
			fmt.Fprintf(stdout, "\n   [kill: the conversation's actor dies mid-stream; its partial answer is dropped]\n   [wake: revived from the log, the turn re-runs]\n   ")
			rt.Kill(liveConv)
			if err := rt.Wake(ctx, liveConv); err != nil {
				fmt.Fprintf(stdout, "wake failed: %v\n", err)
			}
		}
	})
	if err != nil {
		_ = rt.Close()
		return err
	}
	if !killed {
		fmt.Fprintln(stdout, "   (the model streamed no text: nothing to kill mid-stream)")
	}
	if err := rt.Close(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\n[restart: the runtime is closed and opened again on %s]\n", dir)
	if rt, err = lazarus.Open(lazarus.Options{Dir: dir, Model: model}); err != nil {
		return err
	}
	defer rt.Close()
	if _, err := ask(ctx, rt, "In one sentence: what did you just tell me about?", stdout, nil); err != nil {
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
	fmt.Fprintf(stdout, "\ncheck: the log holds %d questions and %d answers (the killed call left none)\n", users, answers)
	if users != 2 || answers != 2 {
		return fmt.Errorf("demo: the log holds %d questions and %d answers, want 2 and 2", users, answers)
	}
	_ = answer
	return nil
}

// ask sends q and prints the streamed answer until the assistant message is
// durable; onDelta (may be nil) sees each delta first.
func ask(ctx context.Context, rt *lazarus.Runtime, q string, stdout io.Writer, onDelta func(string)) (*messages.AssistantMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	seq, err := rt.Send(ctx, liveConv, q, agent.Scope{UserID: "demo"})
	if err != nil {
		return nil, err
	}
	updates, err := rt.Subscribe(ctx, liveConv, seq)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "user> %s\nmodel> ", q)
	for u := range updates {
		switch {
		case u.Err != nil:
			return nil, fmt.Errorf("demo: the turn failed: %w", u.Err)
		case u.Delta != "":
			fmt.Fprint(stdout, u.Delta)
			if onDelta != nil {
				onDelta(u.Delta)
			}
		case u.Event.GetAssistantMsg() != nil:
			a := u.Event.GetAssistantMsg()
			var text strings.Builder
			for _, p := range a.GetContent() {
				text.WriteString(p.GetText())
			}
			fmt.Fprintf(stdout, "\n   [durable at seq %d: %d characters, model %s, %d+%d tokens]\n\n",
				u.Event.GetSeq(), text.Len(), a.GetModel(), a.GetUsage().GetInputTokens(), a.GetUsage().GetOutputTokens())
			return a, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("demo: the subscription ended before an answer")
}
