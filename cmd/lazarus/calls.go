package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	osuser "os/user"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

var pendingCmd = &command{
	name:     "pending",
	synopsis: "[--conversation ID] [--json]",
	summary:  "list human tool calls waiting for an answer, with age and deadline",
	help: `
Lists the pending human tool calls of every conversation (or of one, with
--conversation), soonest deadline first: tool call id, conversation, tool,
age (since the call was made), deadline (and how far away, or overdue by
how much; "none" if it never expires) and the prompt the human is asked.
Answer one with 'lazarus resolve TOOL_CALL_ID --result JSON'.

Pending server calls are not listed: the runtime runs them (again, with
the same tool call id) when it revives the conversation.

With --json the document is {"pending": [...]}, one object per call with
tool_call_id, conversation_id, tool, prompt, args (the call's JSON
arguments as text, compacted: the same offline and with --server),
created, deadline (RFC 3339, empty if none) and age_seconds.

With --server it lists the calls the token's user sees (operators: all).`,
	run:    (*cli).pending,
	remote: true,
}

// pendingJSON is one pending call in --json output.
type pendingJSON struct {
	ToolCallID     string `json:"tool_call_id"`
	ConversationID string `json:"conversation_id"`
	Tool           string `json:"tool"`
	Prompt         string `json:"prompt"`
	Args           string `json:"args"`
	Created        string `json:"created"`
	Deadline       string `json:"deadline"`
	AgeSeconds     int64  `json:"age_seconds"`
}

func (c *cli) pending(ctx context.Context, fs *flags, args []string) (err error) {
	fs.withJSON().withServer()
	conv := fs.String("conversation", "", "list only this conversation's calls (`id`)")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	if isSet(fs, "conversation") {
		if err := journal.ValidateID("conversation id", *conv); err != nil {
			return usagef("%v", err)
		}
	}
	rc, err := c.remote(fs)
	if err != nil {
		return err
	}
	if rc != nil {
		if isSet(fs, "conversation") {
			if _, err := rc.conversation(ctx, *conv); err != nil {
				return err
			}
		}
		calls, err := rc.pendingCalls(ctx)
		if err != nil {
			return err
		}
		var rows []*messages.ToolCallRecord
		for _, call := range calls {
			if !isSet(fs, "conversation") || call.ConversationID == *conv {
				rows = append(rows, callRecord(call))
			}
		}
		return c.printPending(rows, *fs.json)
	}
	st, _, err := c.openStore(fs, false)
	if err != nil {
		return err
	}
	defer closeStore(st, &err)
	var rows []*messages.ToolCallRecord
	collect := func(id string) error {
		pend, err := st.PendingToolCalls(ctx, id)
		if err != nil {
			return err
		}
		for _, p := range pend {
			if p.GetExecutor() == messages.Executor_EXECUTOR_HUMAN {
				rows = append(rows, p)
			}
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
		err = collect(*conv)
	} else {
		// The Store's index of pending calls: the cost is that of the
		// pending calls, not of every conversation.
		err = eachStorePage("pending calls", pendingCursorAfter, func(cursor string) (string, error) {
			page, next, err := st.ListPendingToolCalls(ctx, cursor, 1000)
			for _, p := range page {
				if p.GetExecutor() == messages.Executor_EXECUTOR_HUMAN {
					rows = append(rows, p)
				}
			}
			return next, err
		})
	}
	if err != nil {
		return err
	}
	return c.printPending(rows, *fs.json)
}

// printPending prints pending human calls, soonest deadline first.
func (c *cli) printPending(rows []*messages.ToolCallRecord, asJSON bool) error {
	// Soonest deadline first; calls that never expire last; then oldest.
	slices.SortStableFunc(rows, func(a, b *messages.ToolCallRecord) int {
		da, db := a.GetDeadline(), b.GetDeadline()
		switch {
		case da == nil && db != nil:
			return 1
		case da != nil && db == nil:
			return -1
		case da != nil:
			if d := da.AsTime().Compare(db.AsTime()); d != 0 {
				return d
			}
		}
		if d := a.GetCreated().AsTime().Compare(b.GetCreated().AsTime()); d != 0 {
			return d
		}
		return cmp.Compare(a.GetId(), b.GetId())
	})
	now := c.now()
	if asJSON {
		out := make([]pendingJSON, 0, len(rows))
		for _, r := range rows {
			pj := pendingJSON{
				ToolCallID: r.GetId(), ConversationID: r.GetConversationId(), Tool: r.GetName(),
				Prompt: r.GetPrompt(), Args: compactArgs(r.GetArgs()),
			}
			if r.GetCreated() != nil {
				pj.Created = stamp(r.GetCreated())
				pj.AgeSeconds = int64(max(now.Sub(r.GetCreated().AsTime()), 0).Seconds())
			}
			if r.GetDeadline() != nil {
				pj.Deadline = stamp(r.GetDeadline())
			}
			out = append(out, pj)
		}
		return writeJSON(c.stdout, struct {
			Pending []pendingJSON `json:"pending"`
		}{out})
	}
	if len(rows) == 0 {
		fmt.Fprintln(c.stdout, "no human calls are waiting")
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL_CALL_ID\tCONVERSATION\tTOOL\tAGE\tDEADLINE\tPROMPT")
	for _, r := range rows {
		ageText := "-"
		if r.GetCreated() != nil {
			ageText = age(now.Sub(r.GetCreated().AsTime()))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", displayID(r.GetId()), displayID(r.GetConversationId()),
			displayID(r.GetName()), ageText, deadlineText(r.GetDeadline(), now), quote(r.GetPrompt(), false))
	}
	return tw.Flush()
}

// compactArgs returns a call's JSON arguments compacted, with the escapes
// of <, >, &, U+2028 and U+2029 that a JSON encoder adds written as the
// characters: the text a store keeps (as the model wrote it) and the one a
// node's API sends (compacted and escaped by encoding/json) give the same
// string. Arguments that are not JSON are returned as they are.
func compactArgs(args string) string {
	var buf bytes.Buffer
	if json.Compact(&buf, []byte(args)) != nil {
		return args
	}
	b := buf.Bytes()
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			out = append(out, b[i])
			continue
		}
		if b[i+1] == 'u' && i+6 <= len(b) {
			switch r := strings.ToLower(string(b[i+2 : i+6])); r {
			case "003c", "003e", "0026", "2028", "2029":
				n, _ := strconv.ParseUint(r, 16, 32)
				out = utf8.AppendRune(out, rune(n))
				i += 5
				continue
			}
		}
		// Any other escape, kept whole (so an escaped backslash does not
		// start one).
		out = append(out, b[i], b[i+1])
		i++
	}
	return string(out)
}

var resolveCmd = &command{
	name:     "resolve",
	synopsis: "TOOL_CALL_ID (--result JSON | --reject REASON) [--as USER] [--roles R1,R2]",
	summary:  "answer a pending human tool call (prints stale, exit 3, when too late)",
	help: `
Answers a pending human tool call with a JSON result (--result; "-" reads
it from stdin), or declines it with a reason the model will see (--reject).
It is the same atomic resolve as Runtime.Resolve and Runtime.Reject: one
durable write moves the call from pending to resolved (or errored) and
removes its deadline, only if it is still pending. If it is not (the id is
unknown, the call was already answered, or it expired), nothing changes,
the command prints "stale" and exits with status 3. A call still pending
in an ended conversation (an import cut short leaves one) is refused, as
Runtime.Resolve refuses it (journal.ErrEnded), with status 1, and nothing
changes: an ended conversation runs no turn again.

The conversation continues when a runtime next opens the directory: the
same write marks the conversation active, and a runtime wakes its active
conversations on Open; the revived agent records the answer in its log
(resolution and tool_result events) and calls the model. Only human calls
can be resolved; the runtime runs server calls itself.

The answer is recorded as given by --as (default: the operating system's
user running the command) with the roles of --roles, in the resolution
event and the tool call row. The tools' authorizers live in the
application, not in the store: whoever can open the store answers as an
operator, and the log says who.

With --server the node answers it (Runtime.Resolve or Runtime.Reject) and
the conversation continues at once; the answer is recorded as the token's
user (--as and --roles are refused), and the tool's rules of who may
answer apply. A call the token does not see is stale too. A node takes
any JSON result but null.`,
	run:    (*cli).resolve,
	remote: true,
}

func (c *cli) resolve(ctx context.Context, fs *flags, args []string) (err error) {
	fs.withServer()
	result := fs.String("result", "", "the answer, a `JSON` value; - reads it from stdin")
	reject := fs.String("reject", "", "decline the call with this `reason` instead (the model sees a tool error)")
	as := fs.String("as", "", "who answers, recorded in the log (`user`; default: the operating system's user)")
	roles := fs.String("roles", "", "the answerer's `roles`, comma-separated, recorded in the log")
	pos, err := c.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	id := pos[0]
	if err := journal.ValidateID("tool call id", id); err != nil {
		return usagef("%v", err)
	}
	by := agent.Identity{UserID: *as}
	if by.UserID == "" {
		by.UserID = osUser()
	}
	if *roles != "" {
		by.Roles = strings.Split(*roles, ",")
	}
	if err := agent.ValidateIdentity(by); err != nil {
		return usagef("--as/--roles: %v", err)
	}
	rc, err := c.remote(fs)
	if err != nil {
		return err
	}
	if rc != nil && (isSet(fs, "as") || isSet(fs, "roles")) {
		return usagef("--as and --roles are for a store: a node records the token's user")
	}
	var res *messages.ToolResolution
	switch {
	case isSet(fs, "result") == isSet(fs, "reject"):
		return usagef("give exactly one of --result and --reject")
	case isSet(fs, "reject"):
		if strings.TrimSpace(*reject) == "" {
			return usagef("--reject needs a reason")
		}
		res = &messages.ToolResolution{Status: messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED, Result: agent.ErrorOutcome(agent.CodeRejected, *reject)}
	default:
		text := *result
		if text == "-" {
			b, err := io.ReadAll(io.LimitReader(c.stdin, agent.MaxResultBytes+1))
			if err != nil {
				return fmt.Errorf("read the result from stdin: %w", err)
			}
			text = strings.TrimSpace(string(b))
		}
		// Checked first: stdin is read up to one byte past the bound, and
		// what is cut there is no JSON value.
		if len(text) > agent.MaxResultBytes {
			// The runtime must fit the result in a tool_result event.
			if *result == "-" {
				return usagef("--result -: the result on stdin exceeds %d bytes", agent.MaxResultBytes)
			}
			return usagef("--result of %d bytes exceeds %d", len(text), agent.MaxResultBytes)
		}
		if !agent.ValidJSON(text) {
			return usagef("--result is not a JSON value (quote a string: --result '\"yes\"')")
		}
		if rc != nil && strings.TrimSpace(text) == "null" {
			// The API reads a null result as none (server.Resolve).
			return usagef("--result null: a node takes any JSON value but null")
		}
		res = &messages.ToolResolution{Status: messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED,
			Result: &messages.ToolOutcome{Outcome: &messages.ToolOutcome_Content{Content: text}}}
	}
	if rc != nil {
		return c.resolveRemote(ctx, rc, id, res)
	}
	st, _, err := c.openStore(fs, false)
	if err != nil {
		return err
	}
	defer closeStore(st, &err)
	row, err := c.pendingHumanCall(ctx, st, id, "the runtime runs it; only human calls are resolved from outside")
	if err != nil {
		return err
	}
	conv := row.GetConversationId()
	if ended, err := c.convEnded(ctx, st, conv); err != nil {
		return err
	} else if ended {
		// As Runtime.Resolve refuses it: the conversation runs no turn
		// again, so nothing would record the answer or act on it.
		return fmt.Errorf("tool call %s: conversation %s: %w", displayID(id), displayID(conv), journal.ErrEnded)
	}
	res.ToolCallId = id
	res.At = journal.Timestamp(c.now())
	res.By = by.Proto()
	// What Runtime.Resolve writes (an unfenced append of one resolution),
	// plus status ACTIVE: with no live actor to deliver the answer to, the
	// status is what makes the next runtime wake the conversation and
	// record it.
	req := &messages.AppendRequest{
		ConversationId: conv,
		Unfenced:       true,
		Resolutions:    []*messages.ToolResolution{res},
		Status:         messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE,
	}
	if _, err := st.Append(ctx, req); err != nil {
		if errors.Is(err, journal.ErrStale) || errors.Is(err, journal.ErrDeleted) {
			return c.stale(fmt.Errorf("tool call %s: %w", displayID(id), err))
		}
		return err
	}
	next := "it continues when a runtime next opens the directory"
	if ended, err := c.convEnded(ctx, st, conv); err == nil && ended {
		// Ended by a runtime on the same database since the check above:
		// the answer is recorded (the Store keeps the row ENDED), and no
		// turn follows, as for Runtime.Resolve.
		next = "its conversation was ended meanwhile: the answer is recorded, and no turn follows"
	}
	fmt.Fprintf(c.stdout, "%s %s by %s (conversation %s); %s\n",
		callStatusName(res.GetStatus()), displayID(id), displayID(by.UserID), displayID(conv), next)
	return nil
}

// convEnded reports whether conversation conv's row is ENDED. A
// conversation deleted meanwhile is not: the write that follows finds it
// gone (journal.ErrDeleted), which is how its call is stale.
func (c *cli) convEnded(ctx context.Context, st journal.Store, conv string) (bool, error) {
	row, err := st.Conversation(ctx, conv)
	switch {
	case noConversation(err):
		return false, nil
	case err != nil:
		return false, err
	}
	return row.GetStatus() == messages.ConversationStatus_CONVERSATION_STATUS_ENDED, nil
}

// pendingHumanCall reads the row of tool call id, which must be a pending
// human call: an unknown or answered call is stale (printed, exit 3); a
// server call is invalid, and why says what that means for the command.
func (c *cli) pendingHumanCall(ctx context.Context, st journal.Store, id, why string) (*messages.ToolCallRecord, error) {
	row, err := st.ToolCall(ctx, id)
	switch {
	case errors.Is(err, journal.ErrNotFound):
		return nil, c.stale(fmt.Errorf("no tool call %s: %w", displayID(id), journal.ErrStale))
	case err != nil:
		return nil, err
	case row.GetExecutor() != messages.Executor_EXECUTOR_HUMAN:
		return nil, fmt.Errorf("tool call %s is a %s call of %s: %s: %w",
			displayID(id), executorName(row.GetExecutor()), displayID(row.GetName()), why, journal.ErrInvalid)
	case row.GetStatus() != messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING:
		return nil, c.stale(fmt.Errorf("tool call %s is already %s (at %s): %w",
			displayID(id), callStatusName(row.GetStatus()), stamp(row.GetResolved()), journal.ErrStale))
	}
	return row, nil
}

// osUser names the operating system's user running the command, or
// "operator" when it cannot be told.
func osUser() string {
	if u, err := osuser.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if name := os.Getenv("USER"); name != "" {
		return name
	}
	return "operator"
}

// stale prints "stale" on stdout and returns err (which wraps
// journal.ErrStale: exit status 3).
func (c *cli) stale(err error) error {
	fmt.Fprintln(c.stdout, "stale")
	if !errors.Is(err, journal.ErrStale) {
		err = fmt.Errorf("%w (%w)", err, journal.ErrStale)
	}
	return err
}

// resolveRemote answers the call id on a live node with res's outcome.
func (c *cli) resolveRemote(ctx context.Context, rc *remote, id string, res *messages.ToolResolution) error {
	var call server.Call
	err := rc.call(ctx, http.MethodGet, pathID("/v1/calls/", id), nil, &call)
	switch {
	case errors.Is(err, journal.ErrNotFound):
		return c.stale(fmt.Errorf("no tool call %s: %w", displayID(id), err))
	case err != nil:
		return err
	case call.Status != "pending":
		return c.stale(fmt.Errorf("tool call %s is already %s: %w", displayID(id), call.Status, journal.ErrStale))
	}
	path, body := pathID("/v1/calls/", id)+"/resolve", any(server.Resolve{Result: json.RawMessage(res.GetResult().GetContent())})
	if res.GetStatus() == messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED {
		path, body = pathID("/v1/calls/", id)+"/reject", server.Reject{Reason: res.GetResult().GetError().GetMessage()}
	}
	if err := rc.call(ctx, http.MethodPost, path, body, nil); err != nil {
		if errors.Is(err, journal.ErrStale) || errors.Is(err, journal.ErrNotFound) {
			return c.stale(fmt.Errorf("tool call %s: %w", displayID(id), err))
		}
		return err
	}
	by := "-"
	if err := rc.call(ctx, http.MethodGet, pathID("/v1/calls/", id), nil, &call); err == nil && call.Resolver != nil {
		by = displayID(call.Resolver.UserID)
	}
	fmt.Fprintf(c.stdout, "%s %s by %s (conversation %s); the node continues it\n",
		callStatusName(res.GetStatus()), displayID(id), by, displayID(call.ConversationID))
	return nil
}

// pendingCursorAfter reports whether the ListPendingToolCalls cursor next
// is after cursor in the listing's order (by conversation id, then tool
// call id). A cursor that is not a PendingCursor counts as after: the
// store refuses it on the next page (journal.ErrInvalid).
func pendingCursorAfter(next, cursor string) bool {
	nc, nt, err := journal.ParsePendingCursor(next)
	if err != nil {
		return true
	}
	cc, ct, err := journal.ParsePendingCursor(cursor)
	if err != nil {
		return true
	}
	return journal.PendingAfter(nc, nt, cc, ct)
}
