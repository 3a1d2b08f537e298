package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"sync"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/messages"
)

// childFlag is the hidden flag that makes the demo act 5's child process.
const childFlag = "child"

// childMsg is one line the child writes to its parent (its stdout), as JSON.
// Kinds:
//
//	ready     pid: the runtime is open
//	sent      seq: Send returned; the user message is durable at seq
//	event     seq, event: a durable event (protojson of messages.Event),
//	          as the child's subscription received it
//	tool_run  run: a server tool started (already in the side file)
type childMsg struct {
	Kind  string          `json:"kind"`
	PID   int             `json:"pid,omitempty"`
	Seq   uint64          `json:"seq,omitempty"`
	Event json.RawMessage `json:"event,omitempty"`
	Run   *toolRun        `json:"run,omitempty"`

	ev *messages.Event // Event, decoded by the parent
}

// childPipe writes whole lines to the parent, one at a time.
type childPipe struct {
	mu  sync.Mutex
	w   io.Writer
	err error
}

func (p *childPipe) send(m childMsg) {
	b, err := json.Marshal(m)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return
	}
	if err != nil {
		p.err = err
		return
	}
	_, p.err = p.w.Write(append(b, '\n'))
}

// runChild is act 5's doomed process: it opens the runtime on the demo's
// directory, starts Carol's checkout, whose charge never returns, and
// reports to its parent every event acknowledged as durable and every tool
// run, until the parent kills it with SIGKILL. It returns (with an error)
// only if the parent goes away first.
func runChild(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	p := pacingFor(cfg)
	pipe := &childPipe{w: stdout}
	runs := newToolLog(processChild, cfg.dir, func(r toolRun) { pipe.send(childMsg{Kind: "tool_run", Run: &r}) })
	model := newModel(p)
	model.Push(convCheckout, replyCharge)
	rt, err := lazarus.Open(lazarus.Options{
		Dir:    cfg.dir,
		Model:  model,
		Tools:  tools(p, runs, true),
		Logger: newLogger(stderr, cfg.verbose),
	})
	if err != nil {
		return err
	}
	defer rt.Close()

	subCtx, cancel := context.WithCancel(ctx)
	sub, err := rt.Subscribe(subCtx, convCheckout, 0)
	if err != nil {
		cancel()
		return err
	}
	relayed := make(chan struct{})
	go func() {
		defer close(relayed)
		for u := range sub {
			if u.Event == nil {
				continue
			}
			b, err := protojson.Marshal(u.Event)
			if err != nil {
				continue // the parent sees a gap in seqs and fails its check
			}
			pipe.send(childMsg{Kind: "event", Seq: u.Event.GetSeq(), Event: b})
		}
	}()
	defer func() {
		cancel()
		<-relayed
	}()

	pipe.send(childMsg{Kind: "ready", PID: os.Getpid()})
	seq, err := rt.Send(ctx, convCheckout, "Please charge my card for order A-1043 and ship it.", carol)
	if err != nil {
		return err
	}
	pipe.send(childMsg{Kind: "sent", Seq: seq})

	// Wait to be killed. The parent holds our stdin open until it has
	// killed us; if it closes first, the parent went away. (The reader
	// goroutine outlives this function only as long as the process.)
	parentGone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(parentGone)
	}()
	select {
	case <-parentGone:
		return errors.New("the parent went away before killing this process")
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
