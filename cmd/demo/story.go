package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
)

// The conversations of the story.
const (
	convRefund   = "alice-refund"   // acts 1-4
	convHours    = "bob-hours"      // act 2: carries on while the refund agent is dead
	convCheckout = "carol-checkout" // act 5: the process dies mid-payment
)

// The people of the story. Scope is never persisted: each call names who acts.
var (
	alice   = agent.Scope{UserID: "alice"}
	bob     = agent.Scope{UserID: "bob"}
	carol   = agent.Scope{UserID: "carol"}
	dana    = agent.Scope{UserID: "dana", Permissions: []string{"approve_refund"}}
	manager = agent.Scope{UserID: "mo", Permissions: []string{"approve_refund", "manager"}}
)

// The tools of the support agent.
const (
	toolLookup  = "lookup_order"    // server: reads an order
	toolApprove = "approve_refund"  // human: any support lead; deadline approveTimeout
	toolSignoff = "manager_signoff" // human: a manager; deadline pacing.signoff
	toolCharge  = "charge"          // server: charges a card; blocks in act 5's child
)

// approveTimeout is the deadline of approve_refund: long enough that the
// human of act 3 always answers in time, however slowly the reader reads.
const approveTimeout = 10 * time.Minute

// orders is the shop's database.
var orders = map[string]struct {
	Amount   int    `json:"amount_eur"`
	Customer string `json:"customer"`
}{
	"A-1042": {250, "alice"},
	"A-2077": {900, "alice"},
	"A-1043": {80, "carol"},
}

// What the scripted model says, turn by turn. Each act queues its replies
// just before the message that needs them.
var (
	replyLookup  = scripted.Reply("Let me look up order A-1042.", scripted.Call(toolLookup, `{"order":"A-1042"}`))
	replyAskLead = scripted.Reply("250 EUR is above my 100 EUR limit, so a human has to approve it. I have asked; I will wait.",
		scripted.Call(toolApprove, `{"order":"A-1042","amount_eur":250}`))
	replyRefunded  = scripted.Text("Approved: 250 EUR for order A-1042 is on its way back to your card.")
	replyHours     = scripted.Text("We are open 9:00 to 17:00, Monday to Friday.")
	replyAskMgr    = scripted.Reply("900 EUR needs a manager's sign-off. I have asked one.", scripted.Call(toolSignoff, `{"order":"A-2077","amount_eur":900}`))
	replyNoSignoff = scripted.Text("No manager signed off in time, so I could not refund order A-2077. Someone from the team will get back to you.")
	replyCharge    = scripted.Reply("Charging 80 EUR for order A-1043.", scripted.Call(toolCharge, `{"order":"A-1043","amount_eur":80}`))
	replyCharged   = scripted.Text("Done: your card was charged 80 EUR, once, and order A-1043 ships tomorrow.")
)

// newModel returns the scripted model. A turn the story did not script
// fails (the runtime reports it to subscribers), so a runtime that asks the
// model something unexpected breaks the demo instead of going unnoticed.
func newModel(p pacing) *scripted.Model {
	return scripted.New(scripted.Options{
		Think: p.think,
		Default: func(conv string, turn agent.Turn) (*messages.AssistantMessage, error) {
			return nil, fmt.Errorf("the script has no reply for turn %d of %s", len(turn.Context), conv)
		},
	})
}

// toolRun is one execution of a server tool, as the tool itself saw it.
type toolRun struct {
	Tool         string `json:"tool"`
	ToolCallID   string `json:"tool_call_id"`
	Conversation string `json:"conversation"`
	Process      string `json:"process"` // "demo" or "child"
	PID          int    `json:"pid"`
}

// The processes of the story.
const (
	processDemo  = "demo"
	processChild = "child"
)

// runsFile is the side file, in the store's directory, where every process
// appends (and syncs) each server tool execution before the tool does
// anything: the record a crash cannot erase.
const runsFile = "demo-tool-runs.jsonl"

// toolLog records server tool executions: in the side file, in a feed the
// demo waits on, and through report (the child's pipe to its parent).
type toolLog struct {
	process string
	path    string
	report  func(toolRun) // may be nil
	runs    *feed[toolRun]
	mu      sync.Mutex // serialises appends to the side file
}

func newToolLog(process, dir string, report func(toolRun)) *toolLog {
	return &toolLog{process: process, path: filepath.Join(dir, runsFile), report: report, runs: newFeed[toolRun]()}
}

func (l *toolLog) record(inv agent.Invocation) error {
	r := toolRun{Tool: inv.Name, ToolCallID: inv.ToolCallID, Conversation: inv.ConversationID, Process: l.process, PID: os.Getpid()}
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := l.append(append(line, '\n')); err != nil {
		return fmt.Errorf("demo: record the run of %s: %w", inv.Name, err)
	}
	l.runs.add(r)
	if l.report != nil {
		l.report(r)
	}
	return nil
}

func (l *toolLog) append(line []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.OpenFile(l.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(line)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// of returns the recorded runs of tool.
func (l *toolLog) of(tool string) []toolRun {
	var out []toolRun
	for _, r := range l.runs.all() {
		if r.Tool == tool {
			out = append(out, r)
		}
	}
	return out
}

// readRuns reads the side file: every run of every process, in order.
func readRuns(dir string) ([]toolRun, error) {
	b, err := os.ReadFile(filepath.Join(dir, runsFile))
	if err != nil {
		return nil, err
	}
	var out []toolRun
	dec := json.NewDecoder(bytes.NewReader(b))
	for dec.More() {
		var r toolRun
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("demo: %s: %w", runsFile, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// tools returns the support agent's tools. In act 5's child, charge blocks
// until the process dies (blockCharge); everywhere else it returns at once.
func tools(p pacing, log *toolLog, blockCharge bool) []agent.Tool {
	return []agent.Tool{
		{
			Name: toolLookup, Description: "Look an order up by its id.", Executor: messages.Executor_EXECUTOR_SERVER,
			Parameters: `{"type":"object","properties":{"order":{"type":"string"}},"required":["order"]}`,
			Run: func(_ context.Context, inv agent.Invocation) (string, error) {
				if err := log.record(inv); err != nil {
					return "", err
				}
				var args struct{ Order string }
				if err := json.Unmarshal([]byte(inv.Arguments), &args); err != nil {
					return "", err
				}
				o, ok := orders[args.Order]
				if !ok {
					return "", fmt.Errorf("no order %q", args.Order)
				}
				b, err := json.Marshal(map[string]any{"order": args.Order, "amount_eur": o.Amount, "customer": o.Customer, "status": "delivered, damaged"})
				return string(b), err
			},
		},
		{
			Name: toolApprove, Description: "Ask a support lead to approve a refund.", Executor: messages.Executor_EXECUTOR_HUMAN,
			Timeout: approveTimeout,
			Prompt:  func(args string) string { return "Approve this refund? " + args },
		},
		{
			Name: toolSignoff, Description: "Ask a manager to sign a large refund off.", Executor: messages.Executor_EXECUTOR_HUMAN,
			Timeout: p.signoff,
			Prompt:  func(args string) string { return "Manager: sign this refund off? " + args },
		},
		{
			Name: toolCharge, Description: "Charge the customer's card. The tool call id is the payment's idempotency key.",
			Executor: messages.Executor_EXECUTOR_SERVER,
			Run: func(ctx context.Context, inv agent.Invocation) (string, error) {
				if err := log.record(inv); err != nil {
					return "", err
				}
				if blockCharge {
					// The payment provider is slow; the process dies first.
					<-ctx.Done()
					return "", ctx.Err()
				}
				b, err := json.Marshal(map[string]any{"charged_eur": 80, "idempotency_key": inv.ToolCallID})
				return string(b), err
			},
		},
	}
}
