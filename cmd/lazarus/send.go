package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

var sendCmd = &command{
	name:     "send",
	synopsis: "--server URL [--to ID] [--metadata KEY=VALUE]... [--request-id KEY] [--json] TEXT",
	summary:  "send a user message to a conversation of a live node (--server only)",
	help: `
Sends TEXT ("-" reads it from stdin) as a user message, as the token's
user, to the conversation --to names, or to a new one the command creates
(owned by that user, with the --metadata given) and names. It prints
"sent seq N to conversation ID" once the message is durable; the node then
runs the turn (follow it with 'lazarus tail ID --server URL').

--request-id is the idempotency key: a send retried with the same key
appends nothing twice and prints the first seq.

A message or key the node would refuse (empty, too large, not UTF-8, a
key over 256 bytes) is a usage error found before anything is sent: no
conversation is created for it.

It needs a live node (--server or $` + envServer + `): a store offline has no
runtime to answer the message, so send takes no --dir or --postgres.

With --json the document is {"conversation_id": ..., "seq": N}.`,
	run:     (*cli).send,
	remote:  true,
	noStore: true,
}

// metadataFlag collects --metadata KEY=VALUE flags.
type metadataFlag map[string]string

func (m metadataFlag) String() string { return "" }

func (m metadataFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, not %q", v)
	}
	m[k] = val
	return nil
}

func (c *cli) send(ctx context.Context, fs *flags, args []string) error {
	fs.withJSON().withServer()
	to := fs.String("to", "", "the conversation `id` (default: a new conversation)")
	requestID := fs.String("request-id", "", "the idempotency `key` of the message")
	md := metadataFlag{}
	fs.Var(md, "metadata", "`KEY=VALUE` of a new conversation's metadata (repeatable)")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if isSet(fs, "to") {
		if err := journal.ValidateID("conversation id", *to); err != nil {
			return usagef("%v", err)
		}
		if len(md) > 0 {
			return usagef("--metadata is for a new conversation, not with --to")
		}
	}
	text := pos[0]
	if text == "-" {
		b, err := io.ReadAll(io.LimitReader(c.stdin, journal.MaxEventBytes+1))
		if err != nil {
			return fmt.Errorf("read the message from stdin: %w", err)
		}
		text = strings.TrimSpace(string(b))
	}
	if text == "" {
		return usagef("an empty message")
	}
	// What the node checks of the message, checked before a new
	// conversation is created for it: a refused send creates nothing.
	if isSet(fs, "request-id") {
		if err := journal.ValidateID("request id", *requestID); err != nil {
			return usagef("--request-id: %v", err)
		}
	}
	msg := &messages.UserMessage{Content: []*messages.ContentPart{{Part: &messages.ContentPart_Text{Text: text}}}}
	if err := journal.ValidateEvent(&messages.Event{RequestId: *requestID, Body: &messages.Event_UserMsg{UserMsg: msg}}); err != nil {
		return usagef("the message: %v", err)
	}
	rc, err := c.remote(fs)
	if err != nil {
		return err
	}
	if rc == nil {
		return usagef("send needs a live node: pass --server URL or set $%s", envServer)
	}
	id := *to
	if id == "" {
		var cv server.Conversation
		if err := rc.call(ctx, http.MethodPost, "/v1/conversations", server.CreateConversation{Metadata: md}, &cv); err != nil {
			return fmt.Errorf("create a conversation: %w", err)
		}
		id = cv.ID
	}
	var sent server.Sent
	err = rc.call(ctx, http.MethodPost, pathID("/v1/conversations/", id)+"/messages",
		server.SendMessage{Text: text, RequestID: *requestID}, &sent)
	if err != nil {
		if noConversation(err) {
			return fmt.Errorf("no conversation %s: %w", displayID(id), err)
		}
		return err
	}
	if *fs.json {
		return writeJSON(c.stdout, struct {
			ConversationID string `json:"conversation_id"`
			Seq            uint64 `json:"seq"`
		}{id, sent.Seq})
	}
	fmt.Fprintf(c.stdout, "sent seq %d to conversation %s\n", sent.Seq, displayID(id))
	return nil
}
