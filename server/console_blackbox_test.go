package server_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/server"
)

// These tests check the console from its documentation only (README's
// "Console", the package doc's "Web console" and "Identity and what a user
// may see"), for what the other console tests do not.

// suspendOn makes a new conversation of alice's wait on a call of tool with
// args, and returns the conversation and the call, read over HTTP.
func suspendOn(t *testing.T, ctx context.Context, n *node, model *scripted.Model, tool, args string) (server.Conversation, server.Call) {
	t.Helper()
	conv := n.create(t, tokAlice, map[string]string{"topic": tool})
	model.Push(conv.ID, scripted.Reply("asking", scripted.Call(tool, args)), scripted.Text("done"))
	end, err := n.rt.SendAndWait(ctx, conv.ID, "please "+tool, agent.ScopeOf(agent.Identity{UserID: "alice"}))
	require.NoError(t, err)
	require.Equal(t, lazarus.TurnSuspended, end.Outcome)
	var calls server.CallList
	n.must(t, http.StatusOK, "GET", "/v1/calls", tokOlga, nil, &calls)
	for _, c := range calls.Calls {
		if c.ConversationID == conv.ID {
			return conv, c
		}
	}
	t.Fatalf("no pending call of conversation %s", conv.ID)
	return conv, server.Call{}
}

// toolResult returns the content (or the error message) of the tool_result
// of call in conv's log.
func toolResult(t *testing.T, ctx context.Context, n *node, conv, call string) string {
	t.Helper()
	evs, err := n.rt.History(ctx, conv, 0, 0)
	require.NoError(t, err)
	for _, ev := range evs {
		if r := ev.GetToolResult(); r != nil && r.GetToolCallId() == call {
			if e := r.GetOutcome().GetError(); e != nil {
				return e.GetMessage()
			}
			return r.GetOutcome().GetContent()
		}
	}
	t.Fatalf("no tool_result of call %s in the log", call)
	return ""
}

func pendingStatus(k int) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(`//p[@id="calls-status" and starts-with(., "%d pending")]`, k)))
}

// TestConsoleBlackboxWhoSeesWhatAndTheResult: an approver sees the calls of
// the tool they may approve, not those of a tool without an Authorizer
// (over HTTP, shown only to the owner and operators), and, not reading the
// conversation, its prompt and arguments only, with a countdown to the
// deadline; the owner sees her call of
// the tool without an Authorizer with its conversation's last events.
// Approve sends the result {"approved": true}, with "reason" only when one
// is typed.
func TestConsoleBlackboxWhoSeesWhatAndTheResult(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	payConv, pay := suspendOn(t, ctx, n, model, "approve", `{"amount":7}`)
	askConv, ask := suspendOn(t, ctx, n, model, "ask", `{"question":"go on?"}`)

	carol := newTab(t, browserWait)
	signIn(t, carol, n, tokCarol, "#/calls")
	require.NoError(t, chromedp.Do(carol,
		chromedp.WaitVisible(cardSel(pay.ID, " button.approve")),
		pendingStatus(1),
		// Not carol's to read: the card says so, with no event.
		chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(`//article[@data-call-id=%q]//ol[@class="context"]/li[contains(., "not visible")]`, pay.ID))),
	))
	shown, err := chromedp.Run(carol, chromedp.Evaluate[[]string](`[...document.querySelectorAll('article.call')].map((a) => a.dataset.callId)`))
	require.NoError(t, err)
	require.Equal(t, []string{pay.ID}, shown, "carol sees the approve call only, not the ask call %s", ask.ID)
	events, err := chromedp.Run(carol, chromedp.Evaluate[int](`document.querySelectorAll('article.call .context li[data-kind]').length`))
	require.NoError(t, err)
	require.Zero(t, events, "no event of a conversation carol may not read")
	prompt, err := chromedp.Run(carol, chromedp.Text(cardSel(pay.ID, " .prompt")))
	require.NoError(t, err)
	require.Equal(t, `Approve the payment {"amount":7}?`, prompt)
	args, err := chromedp.Run(carol, chromedp.Text(cardSel(pay.ID, " .args")))
	require.NoError(t, err)
	require.Contains(t, args, `"amount": 7`)
	// The countdown to the deadline (an hour after the call) counts down.
	countdown, err := chromedp.Run(carol, chromedp.Text(cardSel(pay.ID, " .countdown")))
	require.NoError(t, err)
	require.Regexp(t, `^expires in [0-5]?[0-9]m [0-5][0-9]s$`, countdown)
	require.NoError(t, chromedp.Do(carol, chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(
		`//article[@data-call-id=%q]//span[@class="countdown" and starts-with(., "expires in ") and . != %q]`, pay.ID, countdown)))))

	require.NoError(t, chromedp.Do(carol,
		chromedp.SendKeys(cardSel(pay.ID, " input.reason"), "small amount"),
		chromedp.Click(cardSel(pay.ID, " button.approve")),
		chromedp.WaitVisible(cardSel(pay.ID, `[data-state="approved"] .outcome`)),
	))
	require.JSONEq(t, `{"approved":true,"reason":"small amount"}`, toolResult(t, ctx, n, payConv.ID, pay.ID))

	alice := newTab(t, browserWait)
	signIn(t, alice, n, tokAlice, "#/calls")
	require.NoError(t, chromedp.Do(alice,
		chromedp.WaitVisible(cardSel(ask.ID, " button.approve")),
		pendingStatus(1),
		// Hers to read: the last events of the conversation.
		chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(`//article[@data-call-id=%q]//ol[@class="context"]/li[@data-kind="user_msg" and contains(., "please ask")]`, ask.ID))),
		chromedp.Click(cardSel(ask.ID, " button.approve")),
		chromedp.WaitVisible(cardSel(ask.ID, `[data-state="approved"] .outcome`)),
	))
	require.JSONEq(t, `{"approved":true}`, toolResult(t, ctx, n, askConv.ID, ask.ID))
}

// TestConsoleBlackboxRefreshShowsHowCallsEnded: the queue open while others
// act: on Refresh, a call rejected elsewhere is shown already answered,
// rejected and by whom; one that expired, as expired, naming no one; a
// call made since appears, pending; the answered cards cannot be answered.
func TestConsoleBlackboxRefreshShowsHowCallsEnded(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	_, rejected := suspendOn(t, ctx, n, model, "approve", `{"amount":1}`)
	_, expired := suspendOn(t, ctx, n, model, "approve", `{"amount":2}`)

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokCarol, "#/calls")
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitVisible(cardSel(rejected.ID, " button.approve")),
		chromedp.WaitVisible(cardSel(expired.ID, " button.approve")),
		pendingStatus(2),
	))

	n.must(t, http.StatusOK, "POST", "/v1/calls/"+rejected.ID+"/reject", tokDave, map[string]string{"reason": "no"}, nil)
	require.NoError(t, n.rt.Reschedule(ctx, expired.ID, time.Now()))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var got server.Call
		n.must(c, http.StatusOK, "GET", "/v1/calls/"+expired.ID, tokCarol, nil, &got)
		assert.Equal(c, server.CallExpired, got.Outcome)
	}, browserWait, 20*time.Millisecond)
	_, fresh := suspendOn(t, ctx, n, model, "approve", `{"amount":3}`)

	require.NoError(t, chromedp.Do(tab,
		chromedp.Click(chromedp.ID("calls-refresh")),
		chromedp.WaitVisible(cardSel(fresh.ID, `[data-state="pending"] button.approve`)),
		chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(`//article[@data-call-id=%q and @data-state="stale"]//p[@class="outcome" and contains(., "rejected by dave")]`, rejected.ID))),
		chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(`//article[@data-call-id=%q and @data-state="stale"]//p[@class="outcome" and contains(., "expired")]`, expired.ID))),
		pendingStatus(1),
	))
	outcome, err := chromedp.Run(tab, chromedp.Text(cardSel(expired.ID, " .outcome")))
	require.NoError(t, err)
	require.NotContains(t, outcome, " by ", "an expiry names no one")
	disabled, err := chromedp.Run(tab, chromedp.Evaluate[[]bool](fmt.Sprintf(
		`[%q, %q].flatMap((id) => [...document.querySelectorAll('article.call[data-call-id="' + id + '"] button')].map((b) => b.disabled))`,
		rejected.ID, expired.ID)))
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, true, true}, disabled)
}

// TestConsoleBlackboxToken: the token is kept in the tab's sessionStorage
// (not localStorage, not a cookie), survives a reload of the tab, is not
// in another tab, and goes in the Authorization header of every API
// request, the event stream's included, never in a URL; Sign out forgets
// it; a token the server refuses later signs the tab out.
func TestConsoleBlackboxToken(t *testing.T) {
	n := startNode(t, newScripted(), server.Options{})
	conv := n.create(t, tokAlice, nil)

	type seen struct{ uri, auth, cookie string }
	var (
		mu      sync.Mutex
		reqs    []seen
		refused atomic.Bool
	)
	inner := *n.served.Load()
	var recorded http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reqs = append(reqs, seen{r.URL.RequestURI(), r.Header.Get("Authorization"), r.Header.Get("Cookie")})
		mu.Unlock()
		if refused.Load() && strings.HasPrefix(r.URL.Path, "/v1/") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":{"code":"unauthenticated","message":"no valid credentials"}}`))
			return
		}
		inner.ServeHTTP(w, r)
	})
	n.served.Store(&recorded)

	storage := func(tab context.Context) []string {
		t.Helper()
		v, err := chromedp.Run(tab, chromedp.Evaluate[[]string](
			`[String(sessionStorage.getItem('lazarus.console.token')), String(localStorage.length), document.cookie]`))
		require.NoError(t, err)
		return v
	}
	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokAlice, "#/c/"+conv.ID)
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "live")]`))))
	require.Equal(t, []string{tokAlice, "0", ""}, storage(tab))

	require.NoError(t, chromedp.Do(tab,
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "live")]`)),
	))
	visible, err := chromedp.Run(tab, chromedp.Evaluate[bool](`!document.getElementById('login-view').hidden`))
	require.NoError(t, err)
	require.False(t, visible, "signed in still after a reload")

	other := newTab(t, browserWait)
	require.NoError(t, chromedp.Do(other,
		chromedp.Navigate(n.srv.URL+server.ConsolePath),
		chromedp.WaitVisible(chromedp.ID("token")),
	))
	require.Equal(t, []string{"null", "0", ""}, storage(other), "another tab has no token")

	mu.Lock()
	var api, streams int
	for _, r := range reqs {
		require.NotContains(t, r.uri, tokAlice, "a token in a URL")
		require.Empty(t, r.cookie, "a cookie on %s", r.uri)
		if strings.HasPrefix(r.uri, "/v1/") {
			api++
			require.Equal(t, "Bearer "+tokAlice, r.auth, r.uri)
			if strings.HasSuffix(r.uri, "/stream") {
				streams++
			}
		}
	}
	mu.Unlock()
	require.NotZero(t, api)
	require.GreaterOrEqual(t, streams, 2, "the stream, before and after the reload")

	// Refused from now on: the next request signs the tab out.
	refused.Store(true)
	require.NoError(t, chromedp.Do(tab,
		chromedp.Evaluate[chromedp.Void](`location.hash = '#/calls'`),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.Search(`//p[@id="login-error" and contains(., "refused")]`)),
	))
	require.Equal(t, []string{"null", "0", ""}, storage(tab))

	// Sign out forgets the token.
	refused.Store(false)
	signIn(t, tab, n, tokAlice, "")
	require.Equal(t, tokAlice, storage(tab)[0])
	require.NoError(t, chromedp.Do(tab,
		chromedp.Click(chromedp.ID("signout")),
		chromedp.WaitVisible(chromedp.ID("token")),
	))
	require.Equal(t, []string{"null", "0", ""}, storage(tab))
}

// TestConsoleBlackboxUntrustedTextIsText: text that a user or a request
// controls is shown as text, never made into elements: a rejection's
// reason in the live view of the conversation, a metadata value in the
// conversation list, a conversation id from the link, and a search the
// server refuses, whose error quotes it.
func TestConsoleBlackboxUntrustedTextIsText(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	const markup = `<img src="x" class="injected"><b class="injected">bold</b>`
	conv, call := suspendOn(t, ctx, n, model, "approve", `{"amount":5}`)
	n.must(t, http.StatusOK, "POST", "/v1/calls/"+call.ID+"/reject", tokCarol, map[string]string{"reason": markup}, nil)
	other := n.create(t, tokAlice, map[string]string{"note": markup})

	tab := newTab(t, browserWait)
	injected := func() int {
		t.Helper()
		k, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll('.injected, img, b').length`))
		require.NoError(t, err)
		return k
	}
	signIn(t, tab, n, tokAlice, "#/c/"+conv.ID)
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitVisible(chromedp.Search(`//ol[@id="log"]/li[@data-kind="tool_result" and contains(., '<b class="injected">bold</b>')]`)),
	))
	require.Zero(t, injected())

	require.NoError(t, chromedp.Do(tab,
		chromedp.Evaluate[chromedp.Void](`location.hash = '#/conversations'`),
		chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(`//li[@data-conversation-id=%q]/span[@class="md" and contains(., '<img src="x"')]`, other.ID))),
	))
	require.Zero(t, injected())

	id := `<img src=x class=injected>`
	require.NoError(t, chromedp.Do(tab,
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = '#/c/' + %q`, id)),
		chromedp.WaitVisible(chromedp.ID("conv-view")),
		chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and normalize-space(.) != "" and not(contains(., "Loading"))]`)),
	))
	title, err := chromedp.Run(tab, chromedp.Text(chromedp.ID("conv-title")))
	require.NoError(t, err)
	require.Equal(t, id, title)
	require.Zero(t, injected())

	require.NoError(t, chromedp.Do(tab,
		chromedp.Evaluate[chromedp.Void](`location.hash = '#/conversations?q=' + encodeURIComponent('<b>bold</b>')`),
		chromedp.WaitVisible(chromedp.Search(`//p[@id="convs-status" and contains(., "<b>bold</b>")]`)),
	))
	require.Zero(t, injected())
}
