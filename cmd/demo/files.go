package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// Act 6: the agent edits the shop's files; a rewind puts them back; an
// edit replaces a message the model answered.
const (
	convNotice   = "erin-notice" // act 6
	toolEditFile = "edit_file"   // server: writes a file of the shop's workspace, checkpointed first
	workspaceDir = "workspace"   // under the demo's directory: the runtime's file root in act 6
	noticeBefore = "Open 9:00 to 17:00, Monday to Friday.\n"
)

var (
	erin         = agent.Scope{UserID: "erin"}
	replyEditing = scripted.Reply("I will update the notice and add a holiday page.",
		scripted.Call(toolEditFile, `{"path":"notice.txt","content":"Closed for the holidays.\n"}`),
		scripted.Call(toolEditFile, `{"path":"holiday.txt","content":"Back on 2 January.\n"}`))
	replyEdited  = scripted.Text("Done: the notice says we are closed, and there is a holiday page.")
	replyDraft   = scripted.Text("Here is a draft: Closed from 20 December.")
	replyRedraft = scripted.Text("Here is a draft: Closed from 27 December.")
)

// editFileTool writes a file under root, recording it through the call's
// checkpointer first, so that a rewind can put it back.
func editFileTool(root string, log *toolLog) agent.Tool {
	return agent.Tool{
		Name: toolEditFile, Description: "Write a file of the shop's workspace.", Executor: messages.Executor_EXECUTOR_SERVER,
		Parameters: `{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path","content"]}`,
		Run: func(ctx context.Context, inv agent.Invocation) (string, error) {
			if err := log.record(inv); err != nil {
				return "", err
			}
			var args struct{ Path, Content string }
			if err := json.Unmarshal([]byte(inv.Arguments), &args); err != nil {
				return "", err
			}
			if err := inv.CheckpointFile(ctx, args.Path); err != nil {
				return "", err
			}
			if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(args.Path)), []byte(args.Content), 0o644); err != nil {
				return "", err
			}
			return `{"written":true}`, nil
		},
	}
}

// act6: Erin asks the agent to change the shop's notice; the agent's tool
// rewrites one file and creates another, recording each first. Erin takes
// it back: a rewind with Files restores the notice and removes the new
// page, and the log keeps what happened. Then she edits a message the model
// answered: the model answers the new text alone, and the log keeps both.
func (d *demo) act6(ctx context.Context) error {
	d.say("Agents change files, too. The demo reopens its runtime with a file root: every server tool now records a file before it changes it.")
	d.closeRuntime()
	d.workspace = filepath.Join(d.dir, workspaceDir)
	if err := os.MkdirAll(d.workspace, 0o755); err != nil {
		return err
	}
	notice := filepath.Join(d.workspace, "notice.txt")
	if err := os.WriteFile(notice, []byte(noticeBefore), 0o644); err != nil {
		return err
	}
	if err := d.openRuntime(nil); err != nil {
		return err
	}
	if err := d.follow(convNotice, 0); err != nil {
		return err
	}
	if err := d.pause(ctx, 1); err != nil {
		return err
	}
	d.say("Erin asks the agent to announce the holidays.")
	d.model.Push(convNotice, replyEditing, replyEdited)
	if _, err := d.rt.Send(ctx, convNotice, "Please put the holiday notice up.", erin); err != nil {
		return err
	}
	if _, err := d.await(ctx, convNotice, 0, "the agent to finish editing", isAnswer); err != nil {
		return err
	}
	edited, err := os.ReadFile(notice)
	if err != nil {
		return err
	}
	fc, ok := d.rt.Store().(journal.FileCheckpoints)
	if !ok {
		return fmt.Errorf("the store keeps no file checkpoints")
	}
	cps, err := fc.FileCheckpoints(ctx, convNotice, 0)
	if err != nil {
		return err
	}
	d.check("the tool recorded each file before changing it", len(cps) == 2 && string(edited) != noticeBefore,
		"%d checkpoints (notice.txt as it was, holiday.txt as absent); notice.txt now %q", len(cps), string(edited))
	if err := d.pause(ctx, 1); err != nil {
		return err
	}

	d.say("Wrong week. Erin rewinds the conversation to its start, files included.")
	rep, err := d.rt.RewindWithReport(ctx, convNotice, 0, lazarus.RewindOptions{Reason: "wrong week", Files: true}, erin)
	if err != nil {
		return err
	}
	var did []string
	for _, f := range rep.Files {
		did = append(did, fmt.Sprintf("%s %s", f.Path, f.Action))
	}
	d.check("the rewind reports what it did to the files",
		slices.Equal(did, []string{"holiday.txt deleted", "notice.txt restored"}), "%v", did)
	restored, err := os.ReadFile(notice)
	if err != nil {
		return err
	}
	_, statErr := os.Stat(filepath.Join(d.workspace, "holiday.txt"))
	d.check("the files are as they were", string(restored) == noticeBefore && os.IsNotExist(statErr),
		"notice.txt %q; holiday.txt gone: %v", string(restored), os.IsNotExist(statErr))
	evs, err := d.rt.History(ctx, convNotice, 0, 0)
	if err != nil {
		return err
	}
	d.check("the log keeps what happened", len(evs) > 0 && evs[len(evs)-1].GetRewind() != nil && gapFree(evs),
		"%d events, the last a rewind; nothing removed", len(evs))
	if err := d.pause(ctx, 1); err != nil {
		return err
	}

	d.say("Erin asks for a draft instead, then edits her message: the wrong date again.")
	d.model.Push(convNotice, replyDraft)
	asked, err := d.rt.Send(ctx, convNotice, "Draft a notice: closed from 20 December.", erin)
	if err != nil {
		return err
	}
	if _, err := d.await(ctx, convNotice, asked, "the draft", isAnswer); err != nil {
		return err
	}
	d.model.Push(convNotice, replyRedraft)
	edited2, err := d.rt.Edit(ctx, convNotice, asked, "Draft a notice: closed from 27 December.", erin)
	if err != nil {
		return err
	}
	if _, err := d.await(ctx, convNotice, edited2, "the new draft", isAnswer); err != nil {
		return err
	}
	turns := d.model.Turns(convNotice)
	var seenByModel []string
	for _, ev := range turns[len(turns)-1].Context {
		if um := ev.GetUserMsg(); um != nil {
			for _, p := range um.GetContent() {
				seenByModel = append(seenByModel, p.GetText())
			}
		}
	}
	d.check("the model answered the edited message alone",
		slices.Equal(seenByModel, []string{"Draft a notice: closed from 27 December."}), "the model saw %q", seenByModel)
	view, err := d.rt.HistoryView(ctx, convNotice, lazarus.HistoryOptions{})
	if err != nil {
		return err
	}
	rewound := 0
	for _, e := range view {
		if e.Rewound {
			rewound++
		}
	}
	d.check("the log keeps the old message, marked as rewound", rewound > 0 && gapFree(eventsOf(view)),
		"%d events, %d of them rewound", len(view), rewound)
	return nil
}

// eventsOf returns the events of a history view.
func eventsOf(view []lazarus.HistoryEntry) []*messages.Event {
	out := make([]*messages.Event, len(view))
	for i, e := range view {
		out[i] = e.Event
	}
	return out
}
