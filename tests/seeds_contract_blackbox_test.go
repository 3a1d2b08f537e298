package tests

// Black-box checks of promises of the seed documents (shared/seeds) that no
// other scenario pins on every store: the atomic resolve against concurrent
// resolvers including the expiry, and the model-call audit recording exactly
// what the model was given.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// TestSeedsExpiryRacesAnswersWhileDead: a conversation waits on a human
// with its actor dead; its deadline passes while several answers and
// rejections arrive at once. The seeds' resolve is atomic against any
// number of concurrent resolvers, the expiry included: exactly one of them
// wins, every other gets journal.ErrStale, the log holds one resolution
// whose status and resolver are the winner's (the system's for the expiry,
// with a tool-error result), the row agrees, no deadline is left, and the
// revived model is called once, seeing one result for the call.
func TestSeedsExpiryRacesAnswersWhileDead(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), nil)
		ctx := ctxT(t)
		id := h.suspendOne("c", scripted.Text("done"))
		row, err := h.store.ToolCall(ctx, id)
		require.NoError(t, err)
		require.True(t, h.rt.Kill("c"))
		due := row.GetDeadline().AsTime().Sub(h.clock.Now())

		const answers = 4
		errs := make([]error, answers)
		bob := agent.Scope{UserID: "bob"}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range answers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if i%2 == 0 {
					errs[i] = h.rt.Resolve(ctx, id, fmt.Sprintf(`{"approved":true,"click":%d}`, i), bob)
				} else {
					errs[i] = h.rt.Reject(ctx, id, fmt.Sprintf("no %d", i), bob)
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			h.clock.Advance(due)
		}()
		close(start)
		wg.Wait()

		h.awaitEvent("c", 0, isAssistantText("done"))
		won := 0
		for i, err := range errs {
			if err == nil {
				won++
			} else {
				require.ErrorIs(t, err, journal.ErrStale, "answer %d", i)
			}
		}
		var res *messages.Resolution
		for _, ev := range h.history("c") {
			if r := ev.GetResolution(); r != nil {
				require.Nil(t, res, "a second resolution: %v", r)
				res = r
			}
		}
		require.NotNil(t, res, "the call is resolved")
		row, err = h.store.ToolCall(ctx, id)
		require.NoError(t, err)
		require.Equal(t, res.GetStatus(), row.GetStatus(), "the row agrees with the log")
		switch res.GetStatus() {
		case messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED:
			require.Zero(t, won, "the expiry won: every answer is stale")
			require.Equal(t, agent.SystemUserID, res.GetResolver().GetUserId(), "an expiry resolves with the system scope")
			require.NotNil(t, row.GetResult().GetError(), "an expiry is a tool error")
		case messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED:
			require.Equal(t, 1, won, "one answer won, the expiry lost")
			require.Equal(t, "bob", res.GetResolver().GetUserId())
		default:
			t.Fatalf("resolution of status %v", res.GetStatus())
		}
		require.NoError(t, h.store.Deadlines(ctx, time.Time{}, func(d *messages.Deadline) error {
			t.Errorf("a deadline outlived its call: %v", d)
			return nil
		}))
		require.Equal(t, 2, h.model.Calls("c"), "the model is called once after the resolution")
		turns := h.model.Turns("c")
		require.Len(t, toolResults(turns[len(turns)-1], id), 1, "the model sees one result")
	})
}

// TestSeedsAuditRecordsWhatEachTurnRendered: with the audit on, each model
// call has one row, ordered by turn, whose rendered context is exactly
// what the model was given, through a suspension on a human, a kill, an
// answer to the dead conversation and a later message, on every store.
// With the audit off
// (the default) the same conversation records no row.
func TestSeedsAuditRecordsWhatEachTurnRendered(t *testing.T) {
	run := func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		end := h.suspendOnApproval("c", "refund order 42")
		require.True(t, h.rt.Kill("c"))
		h.model.Push("c", scripted.Text("refunded"), scripted.Text("you are welcome"))
		require.NoError(t, h.rt.Resolve(ctx, end.Pending[0].GetToolCallId(), `{"approved":true}`, user))
		h.awaitEvent("c", 0, isAssistantText("refunded"))
		_, err := h.rt.SendAndWait(ctx, "c", "thanks", user)
		require.NoError(t, err)
	}
	forEachStore(t, func(t *testing.T, kind string) {
		t.Run("on", func(t *testing.T) {
			store := openStoreAudit(t, kind, true)
			h := newHarness(t, store, func(o *lazarus.Options) { o.Audit = lazarus.AuditOptions{Enabled: true} })
			run(t, h)
			ctx := ctxT(t)
			turns := h.model.Turns("c")
			require.Len(t, turns, 3)
			check := func(c *assert.CollectT) {
				calls, err := store.ModelCalls(ctx, "c")
				require.NoError(c, err)
				require.Len(c, calls, len(turns))
				for i, mc := range calls {
					if i > 0 {
						assert.Greater(c, mc.GetTurnRef(), calls[i-1].GetTurnRef(), "ordered by turn")
					}
					assert.Equal(c, len(turns[i].Context), len(mc.GetRenderedContext()), "row %d", i)
					for j, ev := range turns[i].Context {
						if j < len(mc.GetRenderedContext()) {
							assert.True(c, proto.Equal(ev, mc.GetRenderedContext()[j]), "row %d, event %d: %v, rendered %v", i, j, ev, mc.GetRenderedContext()[j])
						}
					}
				}
			}
			require.EventuallyWithT(t, check, wait, time.Millisecond, "one row per model call")
		})
		t.Run("off", func(t *testing.T) {
			h := newHarness(t, openStore(t, kind), nil)
			run(t, h)
			calls, err := h.store.ModelCalls(ctxT(t), "c")
			require.NoError(t, err)
			require.Empty(t, calls, "the audit is off by default")
		})
	})
}

// TestSeedsExpiryTurnActsForTheRequester: the expiry resolves a human call
// with the system scope, but the turn it resumes still acts for the user
// who asked for it (Options.ScopeLoader's doc): with the activation that
// took the message still live, under that message's scope; after a kill,
// under the scope the ScopeLoader rebuilds from the identity in the log;
// with no loader, under the system scope, so a tool that needs a user
// fails as a tool error and does not run. Never as the system user.
func TestSeedsExpiryTurnActsForTheRequester(t *testing.T) {
	loader := func(_ context.Context, id agent.Identity) (agent.Scope, error) {
		return agent.Scope{UserID: id.UserID, Roles: id.Roles}, nil
	}
	for _, tc := range []struct {
		name   string
		kill   bool
		loader agent.ScopeLoader
		runs   bool // whoami runs, for alice
	}{
		{"live", false, nil, true},
		{"killed, loader", true, loader, true},
		{"killed, no loader", true, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, kind string) {
				h := newHarness(t, openStore(t, kind), func(o *lazarus.Options) { o.ScopeLoader = tc.loader })
				id := h.suspendOne("c", scripted.Reply("", scripted.Call("whoami", `{}`)), scripted.Text("done"))
				if tc.kill {
					require.True(t, h.rt.Kill("c"))
				}
				h.clock.Advance(time.Hour)
				h.awaitEvent("c", 0, isAssistantText("done"))
				var res *messages.Resolution
				var whoami *messages.ToolOutcome
				for _, ev := range h.history("c") {
					if r := ev.GetResolution(); r != nil {
						res = r
					}
					if r := ev.GetToolResult(); r.GetName() == "whoami" {
						whoami = r.GetOutcome()
					}
				}
				require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_EXPIRED, res.GetStatus())
				require.Equal(t, id, res.GetToolCallId())
				require.Equal(t, agent.SystemUserID, res.GetResolver().GetUserId(), "the expiry resolves as the system")
				require.NotNil(t, whoami, "whoami has a result")
				if !tc.runs {
					require.Equal(t, agent.CodeScope, whoami.GetError().GetCode(), "refused under the system scope")
					require.Empty(t, h.runs.of("whoami"))
					return
				}
				require.Nil(t, whoami.GetError(), "whoami ran")
				require.JSONEq(t, `{"user":"alice"}`, whoami.GetContent(), "the tool acted for the requester")
			})
		})
	}
}

// TestSeedsServerCallRowLifecycle: the seeds' tool_calls table holds a row
// per call, server calls included: pending (with its executor and
// arguments) from the write of the assistant message that asked for it
// while the tool runs, and in the store's pending index; then resolved
// with the tool's result, or errored with the tool's error, in the write
// of its tool_result. Nothing stays pending, and the log's results agree
// with the rows.
func TestSeedsServerCallRowLifecycle(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind string) {
		h := newHarness(t, openStore(t, kind), func(o *lazarus.Options) {
			o.Tools = append(o.Tools, agent.Tool{
				Name: "explode", Description: "always fails", Executor: messages.Executor_EXECUTOR_SERVER,
				Run: func(context.Context, agent.Invocation) (string, error) {
					return "", errors.New("the fuse blew")
				},
			})
		})
		h.chargeGate = make(chan struct{})
		ctx := ctxT(t)
		h.model.Push("c", scripted.Reply("", scripted.Call("explode", `{"n":1}`), scripted.Call("charge", `{"amount":5}`)), scripted.Text("done"))
		_, err := h.rt.Send(ctx, "c", "go", user)
		require.NoError(t, err)
		charge := recv(t, h.chargeStarted, "charge started")

		row, err := h.store.ToolCall(ctx, charge)
		require.NoError(t, err)
		require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_PENDING, row.GetStatus(), "pending while it runs")
		require.Equal(t, messages.Executor_EXECUTOR_SERVER, row.GetExecutor())
		require.Equal(t, "c", row.GetConversationId())
		require.JSONEq(t, `{"amount":5}`, row.GetArgs())
		require.Nil(t, row.GetResult())
		pending, err := h.store.PendingToolCalls(ctx, "c")
		require.NoError(t, err)
		require.True(t, slices.ContainsFunc(pending, func(r *messages.ToolCallRecord) bool { return r.GetId() == charge }),
			"the running call is in the pending index: %v", pending)

		close(h.chargeGate)
		h.awaitEvent("c", 0, isAssistantText("done"))
		results := map[string]*messages.ToolOutcome{}
		for _, ev := range h.history("c") {
			if r := ev.GetToolResult(); r != nil {
				results[r.GetName()] = r.GetOutcome()
				row, err := h.store.ToolCall(ctx, r.GetToolCallId())
				require.NoError(t, err)
				require.True(t, proto.Equal(r.GetOutcome(), row.GetResult()), "%s: the row's result is the log's: %v, %v", r.GetName(), row.GetResult(), r.GetOutcome())
				want := messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED
				if r.GetName() == "explode" {
					want = messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED
				}
				require.Equal(t, want, row.GetStatus(), r.GetName())
				require.NotNil(t, row.GetResolved(), "%s: a resolved time", r.GetName())
			}
		}
		require.Len(t, results, 2)
		require.Contains(t, results["explode"].GetError().GetMessage(), "the fuse blew")
		require.Contains(t, results["charge"].GetContent(), charge, "the result the tool returned")
		pending, err = h.store.PendingToolCalls(ctx, "c")
		require.NoError(t, err)
		require.Empty(t, pending, "nothing stays pending")
	})
}
