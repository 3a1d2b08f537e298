package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pebblejournal"
	"github.com/lazarusrt/lazarus/messages"
)

// act5: the whole process is killed for real. The demo runs itself again as
// a child process on the same directory; the child starts Carol's checkout,
// whose charge blocks; the demo kills it with SIGKILL mid-charge, then opens
// a new runtime on the directory. Every event the child acknowledged is
// there, and the interrupted turn is recovered by the rules: the charge is
// dispatched again with the same tool_call_id, and the model is not asked
// again for the decision it made.
func (d *demo) act5(ctx context.Context) error {
	d.say("So far only actors died; the process lived on. Now the process dies. The demo closes its runtime and runs itself again, as a child process on the same directory.")
	d.closeRuntime()
	if err := d.pause(ctx, 1); err != nil {
		return err
	}
	c, err := d.startChild(ctx)
	if err != nil {
		return err
	}
	defer func() { _, _ = c.kill() }()

	wait, cancel := d.bounded(ctx)
	defer cancel()
	ready, _, err := c.lines.await(wait, 0, "the child to start", func(m childMsg) bool { return m.Kind == "ready" })
	if err != nil {
		return err
	}
	d.say("Child process %d is up. Carol asks it to charge her card for order A-1043.", ready.PID)
	run, _, err := c.lines.await(wait, 0, "the child to start the charge", func(m childMsg) bool {
		return m.Kind == "tool_run" && m.Run != nil && m.Run.Tool == toolCharge
	})
	if err != nil {
		return err
	}
	id := run.Run.ToolCallID
	if _, _, err := c.lines.await(wait, 0, "the charge's tool_call to be acknowledged", func(m childMsg) bool {
		return m.ev.GetToolCall().GetCall().GetId() == id
	}); err != nil {
		return err
	}
	d.say("The charge is in flight (the payment provider is slow), under tool call id\n    %s\nits tool_call event acknowledged as durable.", id)
	if err := d.pause(ctx, 1); err != nil {
		return err
	}
	d.say("kill -9 %d", ready.PID)
	state, err := c.kill()
	if err != nil {
		return err
	}
	status, _ := state.Sys().(syscall.WaitStatus)
	d.check("the child process was killed by SIGKILL in the middle of the turn", status.Signaled() && status.Signal() == syscall.SIGKILL, "%s", state)
	var acked []*messages.Event
	for _, m := range c.lines.all() {
		if m.ev != nil {
			acked = append(acked, m.ev)
		}
	}
	if err := d.pause(ctx, 1); err != nil {
		return err
	}

	d.say("Before starting anything, open the directory the dead process left behind and look.")
	left, err := inspect(ctx, d.dir, id, d.log)
	if err != nil {
		return err
	}
	missing := 0
	for _, ev := range acked {
		if i := int(ev.GetSeq()) - 1; i < 0 || i >= len(left.events) || !proto.Equal(left.events[i], ev) {
			missing++
		}
	}
	d.check("every event the child acknowledged is on disk, unchanged", len(acked) > 0 && missing == 0,
		"%d acknowledged, %d missing or different; %d on disk", len(acked), missing, len(left.events))
	lastEv := left.events[len(left.events)-1]
	d.check("the log stops mid-turn: a charge issued, no result", lastEv.GetToolCall().GetCall().GetId() == id &&
		left.row.GetStatus() == messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING &&
		left.status == messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE,
		"last event #%d %s; the call is %s; the conversation is %s", lastEv.GetSeq(), types([]*messages.Event{lastEv})[0],
		enumName(left.row.GetStatus().String(), "TOOL_CALL_STATUS_"), enumName(left.status.String(), "CONVERSATION_STATUS_"))
	if err := d.pause(ctx, 1); err != nil {
		return err
	}

	d.say("Start a new runtime on the directory, as a restarted server would. On Open it resumes every conversation that was mid-turn.")
	began := time.Now()
	if err := d.openRuntime(func(m *scripted.Model) { m.Push(convCheckout, replyCharged) }); err != nil {
		return err
	}
	last := uint64(len(left.events))
	if err := d.follow(convCheckout, last); err != nil {
		return err
	}
	wait, cancel = d.bounded(ctx)
	defer cancel()
	redo, _, err := d.runs.runs.await(wait, 0, "the charge to be dispatched again", func(r toolRun) bool { return r.Tool == toolCharge })
	if err != nil {
		return err
	}
	res, err := d.await(ctx, convCheckout, last, "the charge's result", isResultOf(id))
	if err != nil {
		return err
	}
	d.revived(5, convCheckout, "a restarted runtime", res.at.Sub(began))
	if _, err := d.await(ctx, convCheckout, res.ev.GetSeq(), "the agent's reply", isAnswer); err != nil {
		return err
	}
	d.say("The new runtime found the charge without a result and ran it again under the same id: a payment API taking it as the idempotency key charges Carol once. (%s from Open to the first new event.)",
		millis(durationMillis(res.at.Sub(began))))

	d.check("the charge was dispatched again with the same tool_call_id", redo.ToolCallID == id, "first %s, again %s", id, redo.ToolCallID)
	turns := d.model.Turns(convCheckout)
	asked := "never"
	if len(turns) > 0 {
		ctxEvs := turns[0].Context
		asked = "with a context ending in " + types(ctxEvs[len(ctxEvs)-1:])[0]
	}
	d.check("the model was not asked again for the decision", len(turns) == 1 && strings.HasSuffix(asked, "tool_result:"+toolCharge) && resultsOf(turns[0].Context, id) == 1,
		"the new runtime called the model %d time(s), first %s", len(turns), asked)
	all, err := readRuns(d.dir)
	if err != nil {
		return err
	}
	var charges []string
	for _, r := range all {
		if r.Tool == toolCharge {
			charges = append(charges, fmt.Sprintf("%s in %s %d", r.ToolCallID, r.Process, r.PID))
		}
	}
	d.check("the side file shows two attempts of one decision, under one key",
		len(charges) == 2 && chargeRuns(all, id, processChild, ready.PID) == 1 && chargeRuns(all, id, processDemo, os.Getpid()) == 1,
		"%s", strings.Join(charges, "; "))
	evs, err := d.history(ctx, convCheckout)
	if err != nil {
		return err
	}
	want := []string{"user_msg", "assistant_msg", "tool_call:" + toolCharge, "tool_result:" + toolCharge, "assistant_msg"}
	got := types(evs)
	d.check("the log tells the whole story, gap-free", slices.Equal(got, want) && gapFree(evs), "%s", strings.Join(got, ", "))
	return nil
}

func resultsOf(evs []*messages.Event, id string) int {
	n := 0
	for _, ev := range evs {
		if ev.GetToolResult().GetToolCallId() == id {
			n++
		}
	}
	return n
}

func chargeRuns(runs []toolRun, id, process string, pid int) int {
	n := 0
	for _, r := range runs {
		if r.Tool == toolCharge && r.ToolCallID == id && r.Process == process && r.PID == pid {
			n++
		}
	}
	return n
}

// remains is what a dead process left in the directory, read with the
// store alone (no runtime, so nothing resumes while we look).
type remains struct {
	events []*messages.Event
	status messages.ConversationStatus
	row    *messages.ToolCallRecord
}

func inspect(ctx context.Context, dir, toolCallID string, log *slog.Logger) (remains, error) {
	store, err := pebblejournal.Open(dir, pebblejournal.Options{})
	if err != nil {
		return remains{}, err
	}
	defer func() {
		if err := store.Close(); err != nil {
			log.Warn("closing the store failed", "err", err)
		}
	}()
	var r remains
	if r.events, err = store.Events(ctx, convCheckout, journal.EventQuery{}); err != nil {
		return r, err
	}
	if len(r.events) == 0 {
		return r, fmt.Errorf("%s has no events on disk", convCheckout)
	}
	conv, err := store.Conversation(ctx, convCheckout)
	if err != nil {
		return r, err
	}
	r.status = conv.GetStatus()
	r.row, err = store.ToolCall(ctx, toolCallID)
	return r, err
}

// child is act 5's child process.
type child struct {
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	lines    *feed[childMsg]
	readDone chan struct{}
	state    *os.ProcessState
	err      error
	killed   bool
}

// startChild runs the demo's own binary with the hidden child flag on the
// demo's directory. Its stdout is read line by line into c.lines (events
// are printed as they arrive); its stderr is ours.
func (d *demo) startChild(ctx context.Context) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the demo's binary: %w", err)
	}
	args := []string{"--" + childFlag, "--dir", d.dir}
	if d.pace.think == 0 {
		args = append(args, "--fast") // the child's model answers at once
	}
	if d.cfg.verbose {
		args = append(args, "--verbose")
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stderr = d.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the child process: %w", err)
	}
	c := &child{cmd: cmd, stdin: stdin, lines: newFeed[childMsg](), readDone: make(chan struct{})}
	go d.readChild(stdout, c)
	return c, nil
}

// readChild decodes the child's lines until its stdout closes. A line cut
// by the kill is not acknowledged and is dropped.
func (d *demo) readChild(r io.Reader, c *child) {
	defer close(c.readDone)
	defer c.lines.end()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var m childMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			d.log.Warn("dropped a line of the child", "line", sc.Text(), "err", err)
			continue
		}
		switch m.Kind {
		case "event":
			ev := new(messages.Event)
			if err := protojson.Unmarshal(m.Event, ev); err != nil {
				d.log.Warn("dropped an event of the child", "err", err)
				continue
			}
			m.ev = ev
			d.out.event(convCheckout, ev, processChild)
		case "tool_run":
			if m.Run == nil {
				continue
			}
			d.out.toolRan(*m.Run)
		}
		c.lines.add(m)
	}
	if err := sc.Err(); err != nil && !errors.Is(err, os.ErrClosed) {
		d.log.Warn("reading the child failed", "err", err)
	}
}

// kill sends SIGKILL, reads the child's last lines and reaps it. It is
// idempotent and returns how the process ended.
func (c *child) kill() (*os.ProcessState, error) {
	if c.killed {
		return c.state, c.err
	}
	c.killed = true
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		c.err = fmt.Errorf("kill the child: %w", err)
	}
	<-c.readDone // the pipe closes when the process is gone
	_ = c.stdin.Close()
	err := c.cmd.Wait()
	c.state = c.cmd.ProcessState
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) && c.err == nil {
		c.err = fmt.Errorf("reap the child: %w", err)
	}
	return c.state, c.err
}
