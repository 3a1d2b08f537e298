package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/server"
)

// The browser tests drive the console in a real headless Chromium (Debian's
// chromium, installed by `make deps`). One browser process serves every
// test of the package; each test opens its own tabs. Without a chromium
// they skip, except in CI (CI=true), where they fail.

// browserWait bounds each wait for the page, generous for a loaded 2-core
// machine.
const browserWait = 60 * time.Second

var browser struct {
	once   sync.Once
	ctx    context.Context
	cancel context.CancelFunc
	err    error
	skip   string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if browser.cancel != nil {
		browser.cancel()
	}
	os.Exit(code)
}

func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// startBrowser starts the package's browser once.
func startBrowser() {
	path := chromiumPath()
	if path == "" {
		if os.Getenv("CI") != "" {
			browser.err = fmt.Errorf("no chromium on PATH in CI: `make deps` installs it")
		} else {
			browser.skip = "no chromium on PATH (`make deps` installs it)"
		}
		return
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // the tests may run as root
		chromedp.DisableGPU,
		chromedp.WindowSize(1100, 900),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	browser.ctx = ctx
	browser.cancel = func() { cancelCtx(); cancelAlloc() }
	// The first Do starts the browser, for as long as its context lives:
	// so ctx itself, not one with a timeout (the test binary's -timeout
	// bounds a start that hangs).
	if err := chromedp.Do(ctx); err != nil {
		browser.err = fmt.Errorf("starting chromium: %w", err)
	}
}

// newTab opens a tab of the shared browser, closed at the end of the test;
// its context ends after timeout.
func newTab(t *testing.T, timeout time.Duration) context.Context {
	t.Helper()
	browser.once.Do(startBrowser)
	if browser.skip != "" {
		t.Skip(browser.skip)
	}
	require.NoError(t, browser.err)
	tab, closeTab := chromedp.NewContext(browser.ctx)
	ctx, cancel := context.WithTimeout(tab, timeout)
	t.Cleanup(func() { cancel(); closeTab() })
	require.NoError(t, chromedp.Do(ctx))
	return ctx
}

// signIn opens the console at path (a hash route) in tab and signs in with
// token through its form.
func signIn(t *testing.T, tab context.Context, n *node, token, route string) {
	t.Helper()
	require.NoError(t, chromedp.Do(tab,
		chromedp.Navigate(n.srv.URL+"/"), // redirected to the console
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.ID("nav")),
	))
	if route != "" {
		require.NoError(t, chromedp.Do(tab, chromedp.Evaluate[chromedp.Void](fmt.Sprintf("location.hash = %q", route))))
	}
}

func cardSel(callID, rest string) chromedp.CSS {
	return chromedp.CSS(fmt.Sprintf(`article.call[data-call-id=%q]%s`, callID, rest))
}

// TestConsoleApprove: an approver signs in, finds the pending call in the
// queue with its prompt and arguments, and approves it with a reason; the
// log records the resolution with the approver's id, and the card says it
// was approved.
func TestConsoleApprove(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv, call := suspendOnApproval(t, ctx, n, model)

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokCarol, "")
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(cardSel(call.ID, " button.approve"))))
	prompt, err := chromedp.Run(tab, chromedp.Text(cardSel(call.ID, " .prompt")))
	require.NoError(t, err)
	require.Equal(t, `Approve the payment {"amount":120}?`, prompt)
	args, err := chromedp.Run(tab, chromedp.Text(cardSel(call.ID, " .args")))
	require.NoError(t, err)
	require.Contains(t, args, `"amount": 120`)
	countdown, err := chromedp.Run(tab, chromedp.Text(cardSel(call.ID, " .countdown")))
	require.NoError(t, err)
	require.Contains(t, countdown, "expires in")

	require.NoError(t, chromedp.Do(tab,
		chromedp.SendKeys(cardSel(call.ID, " input.reason"), "within budget"),
		chromedp.Click(cardSel(call.ID, " button.approve")),
		chromedp.WaitVisible(cardSel(call.ID, `[data-state="approved"] .outcome`)),
	))

	// The resolution event, with carol as the resolver, is in the log: the
	// subscription replays the log, then follows it until it is.
	updates, err := n.rt.Subscribe(ctx, conv.ID, 0)
	require.NoError(t, err)
	for {
		select {
		case u, ok := <-updates:
			require.True(t, ok, "the subscription ended before the resolution")
			if r := u.Event.GetResolution(); r != nil {
				require.Equal(t, call.ID, r.GetToolCallId())
				require.Equal(t, messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED, r.GetStatus())
				require.Equal(t, "carol", r.GetResolver().GetUserId())
				var shown server.Call
				n.must(t, http.StatusOK, "GET", "/v1/calls/"+call.ID, tokCarol, nil, &shown)
				require.Equal(t, "resolved", shown.Status)
				return
			}
		case <-ctx.Done():
			t.Fatal("no resolution event in the log")
		}
	}
}

// TestConsoleTwoTabsOneWins: two approvers have the same call open in two
// tabs and both approve it at once: exactly one answer is recorded, and
// the other tab says the call was already answered, by whom.
func TestConsoleTwoTabsOneWins(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	_, call := suspendOnApproval(t, ctx, n, model)

	tabs := []context.Context{newTab(t, browserWait), newTab(t, browserWait)}
	// Both may answer the call (an operator may not: the tool wants an
	// approver).
	users := []string{"carol", "dave"}
	signIn(t, tabs[0], n, tokCarol, "#/calls")
	signIn(t, tabs[1], n, tokDave, "#/calls")
	for _, tab := range tabs {
		require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(cardSel(call.ID, " button.approve"))))
	}
	var wg sync.WaitGroup
	errs := make([]error, len(tabs))
	for i, tab := range tabs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = chromedp.Do(tab, chromedp.Click(cardSel(call.ID, " button.approve")))
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])

	states := make([]string, len(tabs))
	outcomes := make([]string, len(tabs))
	for i, tab := range tabs {
		// Wait until the card has left the pending state and its answer
		// (and, for the loser, who won) is shown.
		require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(
			cardSel(call.ID, `:is([data-state="approved"], [data-state="stale"]) .outcome:not(:empty)`))))
		var err error
		states[i], err = chromedp.Run(tab, chromedp.Evaluate[string](
			fmt.Sprintf(`document.querySelector('article.call[data-call-id=%q]').dataset.state`, call.ID)))
		require.NoError(t, err)
		outcomes[i], err = chromedp.Run(tab, chromedp.Text(cardSel(call.ID, " .outcome")))
		require.NoError(t, err)
	}
	winner := -1
	for i, s := range states {
		if s == "approved" {
			require.Equal(t, -1, winner, "both tabs won: %v", states)
			winner = i
		}
	}
	require.NotEqual(t, -1, winner, "no tab won: %v %v", states, outcomes)
	loser := 1 - winner
	require.Equal(t, "stale", states[loser])
	require.Contains(t, outcomes[loser], "Already answered")

	var shown server.Call
	n.must(t, http.StatusOK, "GET", "/v1/calls/"+call.ID, tokOlga, nil, &shown)
	require.Equal(t, "resolved", shown.Status)
	require.Equal(t, users[winner], shown.Resolver.UserID)
	// The loser's tab names the winner once it has read the call.
	require.NoError(t, chromedp.Do(tabs[loser], chromedp.WaitVisible(
		chromedp.Search(fmt.Sprintf(`//article[@data-call-id=%q]//p[contains(., "by %s")]`, call.ID, users[winner])))))
}

// TestConsoleLiveConversation: the owner watches a conversation in the
// console while an approver answers its pending call over the API: the
// resolution (with the approver's id) and the model's answer appear live,
// from the event stream.
func TestConsoleLiveConversation(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv, call := suspendOnApproval(t, ctx, n, model)

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokAlice, "#/c/"+conv.ID)
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitVisible(chromedp.CSS(`#log li[data-kind="suspension"]`)),
		chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "live")]`)),
	))
	status, err := chromedp.Run(tab, chromedp.Text(chromedp.ID("conv-status")))
	require.NoError(t, err)
	require.Equal(t, "suspended", status)
	md, err := chromedp.Run(tab, chromedp.Text(chromedp.ID("conv-meta")))
	require.NoError(t, err)
	require.Contains(t, md, "payment")

	n.must(t, http.StatusOK, "POST", "/v1/calls/"+call.ID+"/resolve", tokCarol, map[string]any{"result": map[string]bool{"approved": true}}, nil)
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitVisible(chromedp.Search(`//ol[@id="log"]/li[@data-kind="resolution" and contains(., "resolved by carol")]`)),
		chromedp.WaitVisible(chromedp.Search(`//ol[@id="log"]/li[@data-kind="assistant_msg" and contains(., "paid")]`)),
	))

	// A message sent from the console is answered live.
	model.Push(conv.ID, scripted.Text("all done"))
	require.NoError(t, chromedp.Do(tab,
		chromedp.SendKeys(chromedp.ID("send-text"), "thanks"),
		chromedp.Click(chromedp.ID("send-submit")),
		chromedp.WaitVisible(chromedp.Search(`//ol[@id="log"]/li[@data-kind="user_msg" and contains(., "thanks")]`)),
		chromedp.WaitVisible(chromedp.Search(`//ol[@id="log"]/li[@data-kind="assistant_msg" and contains(., "all done")]`)),
		chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-status" and text()="idle"]`)),
	))
	// Opened again, the answered conversation shows as idle, its whole log
	// loaded once.
	require.NoError(t, chromedp.Do(tab,
		chromedp.Evaluate[chromedp.Void](`location.hash = '#/calls'`),
		chromedp.WaitVisible(chromedp.ID("calls-view")),
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = '#/c/%s'`, conv.ID)),
		chromedp.WaitVisible(chromedp.Search(`//ol[@id="log"]/li[@data-kind="assistant_msg" and contains(., "all done")]`)),
		chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "live")]`)),
	))
	status, err = chromedp.Run(tab, chromedp.Text(chromedp.ID("conv-status")))
	require.NoError(t, err)
	require.Equal(t, "idle", status)
	shown, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll('#log li[data-seq]').length`))
	require.NoError(t, err)
	evs, err := n.rt.History(ctx, conv.ID, 0, 0)
	require.NoError(t, err)
	require.Equal(t, "thanks", evs[len(evs)-2].GetUserMsg().GetContent()[0].GetText())
	require.Equal(t, "alice", evs[len(evs)-2].GetAuthor().GetUserId())
	require.Len(t, evs, shown, "each event of the log once")
}

// TestConsoleSearchConversations: the conversation list shows the caller's
// conversations with their metadata, and a metadata search narrows it.
func TestConsoleSearchConversations(t *testing.T) {
	n := startNode(t, newScripted(), server.Options{})
	refund := n.create(t, tokAlice, map[string]string{"topic": "refund", "region": "eu"})
	payment := n.create(t, tokAlice, map[string]string{"topic": "payment", "region": "eu"})
	bobs := n.create(t, tokBob, map[string]string{"topic": "refund"})

	row := func(id string) chromedp.CSS {
		return chromedp.CSS(fmt.Sprintf(`#convs li[data-conversation-id=%q]`, id))
	}
	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokAlice, "#/conversations")
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitVisible(row(refund.ID)),
		chromedp.WaitVisible(row(payment.ID)),
	))
	count, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll('#convs li').length`))
	require.NoError(t, err)
	require.Equal(t, 2, count, "bob's conversation %s is not alice's to see", bobs.ID)

	require.NoError(t, chromedp.Do(tab,
		chromedp.SendKeys(chromedp.ID("search"), "topic=refund region=eu"),
		chromedp.Click(chromedp.ID("search-submit")),
		chromedp.WaitNotPresent(row(payment.ID)),
		chromedp.WaitVisible(row(refund.ID)),
		chromedp.WaitVisible(chromedp.Search(`//p[@id="convs-status" and contains(., "1 shown")]`)),
	))
	hash, err := chromedp.Run(tab, chromedp.Evaluate[string](`location.hash`))
	require.NoError(t, err)
	require.Equal(t, "#/conversations?q=topic%3Drefund%20region%3Deu", hash)

	// A term that is not key=value is refused in the page.
	require.NoError(t, chromedp.Do(tab, chromedp.Evaluate[chromedp.Void](`location.hash = '#/conversations?q=oops'`),
		chromedp.WaitVisible(chromedp.Search(`//p[@id="convs-status" and contains(., "not key=value")]`))))
	// So is one with an empty value, which the API would refuse.
	require.NoError(t, chromedp.Do(tab, chromedp.Evaluate[chromedp.Void](`location.hash = '#/conversations?q=topic%3D'`),
		chromedp.WaitVisible(chromedp.Search(`//p[@id="convs-status" and contains(., '"topic=" is not key=value')]`))))
}

// TestConsoleBadToken: a refused token leaves the console on its sign-in
// form with an error, and nothing in session storage.
func TestConsoleBadToken(t *testing.T) {
	n := startNode(t, newScripted(), server.Options{})
	tab := newTab(t, browserWait)
	require.NoError(t, chromedp.Do(tab,
		chromedp.Navigate(n.srv.URL+server.ConsolePath),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), "not-a-token"),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.Search(`//p[@id="login-error" and contains(., "refused")]`)),
	))
	stored, err := chromedp.Run(tab, chromedp.Evaluate[*string](`sessionStorage.getItem('lazarus.console.token')`))
	require.NoError(t, err)
	require.Nil(t, stored)
}

// TestConsoleTokenWithCharactersNoTokenHas: a token with a character
// outside ISO-8859-1, which no header value can hold, is refused on the
// sign-in form as not valid, without a request: fetch threw on it, and the
// form said the server could not be reached.
func TestConsoleTokenWithCharactersNoTokenHas(t *testing.T) {
	n := startNode(t, newScripted(), server.Options{})
	var apiRequests atomic.Int32
	inner := *n.served.Load()
	var counted http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			apiRequests.Add(1)
		}
		inner.ServeHTTP(w, r)
	})
	n.served.Store(&counted)
	tab := newTab(t, browserWait)
	require.NoError(t, chromedp.Do(tab,
		chromedp.Navigate(n.srv.URL+server.ConsolePath),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('token').value = 't-carol\u2713'`),
		chromedp.Click(chromedp.ID("login-submit")),
		chromedp.WaitVisible(chromedp.Search(`//p[@id="login-error" and normalize-space(.) != ""]`)),
	))
	shown, err := chromedp.Run(tab, chromedp.Text(chromedp.ID("login-error")))
	require.NoError(t, err)
	require.Equal(t, "This token is not valid: it has characters a token cannot have.", shown)
	stored, err := chromedp.Run(tab, chromedp.Evaluate[*string](`sessionStorage.getItem('lazarus.console.token')`))
	require.NoError(t, err)
	require.Nil(t, stored)
	require.Zero(t, apiRequests.Load(), "no request is sent")
}

// TestConsoleScreenshot: the queue as an operator sees it, with the
// conversation context of each call, saved as a PNG (in the test's temp
// dir, or at $LAZARUS_CONSOLE_PNG to refresh docs/console.png); and on a
// phone's width, the queue fits without scrolling sideways.
func TestConsoleScreenshot(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	_, first := suspendOnApproval(t, ctx, n, model)
	conv := n.create(t, tokAlice, map[string]string{"topic": "refund"})
	model.Push(conv.ID, scripted.Reply("I need a human for this.", scripted.Call("ask", `{"question":"Refund order 42 without a receipt?"}`)), scripted.Text("ok"))
	st := n.stream(t, ctx, tokAlice, conv.ID, "")
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice, server.SendMessage{Text: "refund order 42, I lost the receipt"}, nil)
	st.until(t, "turn_end", `"suspended"`)
	st.close()

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokOlga, "")
	require.NoError(t, chromedp.Do(tab,
		chromedp.EmulateViewport(1000, 900),
		chromedp.WaitVisible(cardSel(first.ID, ` .context li[data-kind="user_msg"]`)),
		chromedp.WaitVisible(chromedp.Search(`//article[@data-call-id]//ol[@class="context"]/li[contains(., "lost the receipt")]`)),
	))
	png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(png), "\x89PNG"), "not a PNG")
	path := filepath.Join(t.TempDir(), "console.png")
	if p := os.Getenv("LAZARUS_CONSOLE_PNG"); p != "" {
		path = p
	}
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("screenshot of the queue: %s", path)

	require.NoError(t, chromedp.Do(tab, chromedp.EmulateViewport(375, 740, chromedp.EmulateMobile)))
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(cardSel(first.ID, " button.approve"))))
	fits, err := chromedp.Run(tab, chromedp.Evaluate[bool](`document.documentElement.scrollWidth <= window.innerWidth`))
	require.NoError(t, err)
	require.True(t, fits, "the queue scrolls sideways on a phone")
}

// TestConsoleReject: Reject needs a reason; with one, the call is
// rejected, with that reason and the approver as its resolver.
func TestConsoleReject(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv, call := suspendOnApproval(t, ctx, n, model)

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokCarol, "")
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitVisible(cardSel(call.ID, " button.reject")),
		chromedp.Click(cardSel(call.ID, " button.reject")),
		chromedp.WaitVisible(chromedp.Search(`//p[@class="outcome" and contains(., "Give a reason")]`)),
	))
	var shown server.Call
	n.must(t, http.StatusOK, "GET", "/v1/calls/"+call.ID, tokCarol, nil, &shown)
	require.Equal(t, "pending", shown.Status, "no answer without a reason")

	require.NoError(t, chromedp.Do(tab,
		chromedp.SendKeys(cardSel(call.ID, " input.reason"), "over the limit"),
		chromedp.Click(cardSel(call.ID, " button.reject")),
		chromedp.WaitVisible(cardSel(call.ID, `[data-state="rejected"] .outcome`)),
	))
	n.must(t, http.StatusOK, "GET", "/v1/calls/"+call.ID, tokCarol, nil, &shown)
	require.Equal(t, "errored", shown.Status)
	require.Equal(t, "carol", shown.Resolver.UserID)
	updates, err := n.rt.Subscribe(ctx, conv.ID, 0)
	require.NoError(t, err)
	for {
		select {
		case u, ok := <-updates:
			require.True(t, ok, "the subscription ended before the rejection reached the log")
			if r := u.Event.GetToolResult(); r != nil && r.GetToolCallId() == call.ID {
				require.Contains(t, r.GetOutcome().GetError().GetMessage(), "over the limit")
				return
			}
		case <-ctx.Done():
			t.Fatal("no tool result of the rejected call in the log")
		}
	}
}

// TestConsoleShowsHandoffsAndAgents: in a conversation with named agents,
// the live view shows a handoff with the agents it goes between and its
// message, and names the agent of each named agent's event (a handoff was
// an empty "event" line, and the critic's answer looked like the default
// agent's).
func TestConsoleShowsHandoffsAndAgents(t *testing.T) {
	ctx := testContext(t)
	model, crit := newScripted(), newScripted()
	n := startNodeIn(t, "", model, server.Options{}, func(o *lazarus.Options) {
		o.Agents = []lazarus.Agent{{Name: "critic", Model: crit}}
	})
	conv := n.create(t, tokAlice, nil)
	model.Push(conv.ID, scripted.Reply("", scripted.Call(lazarus.HandoffToolName, `{"agent":"critic","message":"please review <b>this</b>"}`)))
	crit.Push(conv.ID, scripted.Text("reviewed: fine"))
	st := n.stream(t, ctx, tokAlice, conv.ID, "")
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice, server.SendMessage{Text: "draft"}, nil)
	st.until(t, "event", "reviewed: fine")
	st.close()

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokAlice, "#/c/"+conv.ID)
	critAnswer := chromedp.Search(`//ol[@id="log"]/li[@data-kind="assistant_msg" and contains(., "reviewed: fine")]`)
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitVisible(chromedp.CSS(`#log li[data-kind="handoff"]`)),
		chromedp.WaitVisible(critAnswer),
	))
	handoff, err := chromedp.Run(tab, chromedp.Text(chromedp.CSS(`#log li[data-kind="handoff"]`)))
	require.NoError(t, err)
	answer, err := chromedp.Run(tab, chromedp.Text(critAnswer))
	require.NoError(t, err)
	require.Contains(t, handoff, "handoff default → critic")
	require.Contains(t, handoff, "please review <b>this</b>", "the message, as text")
	require.Contains(t, answer, "[critic]")
}

// TestConsoleQueueBeyondOnePage: the queue reads the pending calls a page
// of the API at a time, ordered by conversation id; a call that new calls
// of conversations sorting before it push past the page the console read
// is still pending, and its card stays so (it was shown as "Already
// answered: pending." with its buttons disabled); a call answered
// elsewhere is still shown as answered.
func TestConsoleQueueBeyondOnePage(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	olga := agent.ScopeOf(agent.Identity{UserID: "olga", Roles: []string{"operator"}})
	// suspend makes a conversation of Go code (seen by operators only)
	// wait on an "ask" call, and returns the call's id.
	suspend := func(conv string) string {
		model.Push(conv, scripted.Reply("question", scripted.Call("ask", `{"q":"?"}`)))
		end, err := n.rt.SendAndWait(ctx, conv, "go", olga)
		require.NoError(t, err)
		require.Equal(t, lazarus.TurnSuspended, end.Outcome)
		pend, err := n.rt.Store().PendingToolCalls(ctx, conv)
		require.NoError(t, err)
		require.Len(t, pend, 1)
		return pend[0].GetId()
	}
	const page = 100 // the console's page of calls
	var first string
	for i := range page - 1 {
		id := suspend(fmt.Sprintf("m-%03d", i))
		if i == 0 {
			first = id
		}
	}
	last := suspend("z-last") // the last of the first page

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokOlga, "#/calls")
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(cardSel(last, " button.approve"))))

	// Two calls of conversations sorting first push "z-last" to the
	// second page while another answers the first call over the API.
	pushed := suspend("a-new")
	suspend("b-new")
	n.must(t, http.StatusOK, "POST", "/v1/calls/"+first+"/resolve", tokOlga, `{"result":"done"}`, nil)
	_, err := chromedp.Run(tab, chromedp.Evaluate[chromedp.Void](`loadCalls()`, chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitVisible(cardSel(pushed, " button.approve")),
		chromedp.WaitVisible(cardSel(first, `[data-state="stale"] .outcome`)),
	))
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(
		chromedp.Search(fmt.Sprintf(`//article[@data-call-id=%q]//p[contains(., "Already answered by olga")]`, first)))))
	state, err := chromedp.Run(tab, chromedp.Evaluate[string](
		fmt.Sprintf(`document.querySelector('article.call[data-call-id=%q]').dataset.state`, last)))
	require.NoError(t, err)
	require.Equal(t, "pending", state, "a pending call past the page read is not answered")
	disabled, err := chromedp.Run(tab, chromedp.Evaluate[bool](
		fmt.Sprintf(`document.querySelector('article.call[data-call-id=%q] button.approve').disabled`, last)))
	require.NoError(t, err)
	require.False(t, disabled)

	// It is still answered from its card.
	require.NoError(t, chromedp.Do(tab,
		chromedp.Click(cardSel(last, " button.approve")),
		chromedp.WaitVisible(cardSel(last, `[data-state="approved"] .outcome`)),
	))
	var shown server.Call
	n.must(t, http.StatusOK, "GET", "/v1/calls/"+last, tokOlga, nil, &shown)
	require.Equal(t, "resolved", shown.Status)
}

// abandoningModel streams "partial" on its first call and waits for the
// call to be abandoned; its next call streams "fresh" and answers once
// release is closed.
type abandoningModel struct {
	calls   atomic.Int32
	release chan struct{}
}

func (m *abandoningModel) Generate(ctx context.Context, _ agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
	if m.calls.Add(1) == 1 {
		onDelta("partial")
		<-ctx.Done()
		return nil, ctx.Err()
	}
	onDelta("fresh")
	select {
	case <-m.release:
		return agent.Text("fresh"), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestConsoleDropsAnAbandonedAnswer: the live view shows the answer in
// progress; when a newer message abandons the model call (the stream's
// "restart"), the text streamed so far is dropped, and the new call's
// deltas are shown alone (they were appended to the abandoned text).
func TestConsoleDropsAnAbandonedAnswer(t *testing.T) {
	model := &abandoningModel{release: make(chan struct{})}
	n := startNode(t, model, server.Options{})
	conv := n.create(t, tokAlice, nil)
	path := "/v1/conversations/" + conv.ID + "/messages"

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokAlice, "#/c/"+conv.ID)
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "live")]`))))
	n.must(t, http.StatusAccepted, "POST", path, tokAlice, server.SendMessage{Text: "one"}, nil)
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.Search(`//*[@id="delta" and .="partial"]`))))

	n.must(t, http.StatusAccepted, "POST", path, tokAlice, server.SendMessage{Text: "two"}, nil)
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitVisible(chromedp.Search(`//ol[@id="log"]/li[@data-kind="user_msg" and contains(., "two")]`)),
		chromedp.WaitVisible(chromedp.Search(`//*[@id="delta" and contains(., "fresh")]`)),
	))
	delta, err := chromedp.Run(tab, chromedp.Text(chromedp.ID("delta")))
	require.NoError(t, err)
	require.Equal(t, "fresh", delta, "the abandoned call's text is dropped")

	close(model.release)
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitVisible(chromedp.Search(`//ol[@id="log"]/li[@data-kind="assistant_msg" and contains(., "fresh")]`)),
		chromedp.WaitNotVisible(chromedp.ID("delta")),
	))
}

// TestConsoleLiveAcrossARestart: the live view of a conversation follows it
// across a restart of the server: the stream the shutdown ends (an error
// of code closed) is reconnected with Last-Event-ID, and what the new
// server writes shows live, each event once (the view stopped for good,
// "stream ended", as for a deleted conversation).
func TestConsoleLiveAcrossARestart(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	model := newScripted()
	n := startNodeIn(t, dir, model, server.Options{})
	conv := n.create(t, tokAlice, nil)
	path := "/v1/conversations/" + conv.ID + "/messages"
	model.Push(conv.ID, scripted.Text("before"))
	n.must(t, http.StatusAccepted, "POST", path, tokAlice, server.SendMessage{Text: "one"}, nil)

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokAlice, "#/c/"+conv.ID)
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitVisible(chromedp.Search(`//ol[@id="log"]/li[@data-kind="assistant_msg" and contains(., "before")]`)),
		chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "live")]`)),
	))

	n.restart(t, dir)
	model.Push(conv.ID, scripted.Text("after"))
	n.must(t, http.StatusAccepted, "POST", path, tokAlice, server.SendMessage{Text: "two"}, nil)
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitVisible(chromedp.Search(`//ol[@id="log"]/li[@data-kind="assistant_msg" and contains(., "after")]`)),
		chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "live")]`)),
	))
	shown, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll('#log li[data-seq]').length`))
	require.NoError(t, err)
	evs, err := n.rt.History(ctx, conv.ID, 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, shown, "each event of the log once")
}

// TestConsoleShowsARefusedStream: a stream the server refuses for good
// is said so in the live view, with the server's message: here, after a
// restart on an older copy of the store, the view's Last-Event-ID is past
// the log's end (400 invalid). The view retried it forever, saying only
// "reconnecting…".
func TestConsoleShowsARefusedStream(t *testing.T) {
	ctx := testContext(t)
	dir, backup := t.TempDir(), t.TempDir()
	model := newScripted()
	n := startNodeIn(t, dir, model, server.Options{})
	conv := n.create(t, tokAlice, nil)
	path := "/v1/conversations/" + conv.ID + "/messages"
	model.Push(conv.ID, scripted.Text("before"), scripted.Text("after"))
	st := n.stream(t, ctx, tokAlice, conv.ID, "")
	n.must(t, http.StatusAccepted, "POST", path, tokAlice, server.SendMessage{Text: "one"}, nil)
	st.until(t, "turn_end", "answered")
	st.close()
	n.stop(t)
	require.NoError(t, os.CopyFS(backup, os.DirFS(dir)))
	n.start(t, dir)

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokAlice, "#/c/"+conv.ID)
	n.must(t, http.StatusAccepted, "POST", path, tokAlice, server.SendMessage{Text: "two"}, nil)
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitVisible(chromedp.Search(`//ol[@id="log"]/li[@data-kind="assistant_msg" and contains(., "after")]`)),
	))

	n.restart(t, backup)
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "the log ends at seq 2")]`)),
	))
}

// TestConsoleOlderEventsStayInTheirView: older events asked for in one
// conversation's view and answered after the view was left for another
// conversation are dropped: they were put at the top of the other
// conversation's log.
func TestConsoleOlderEventsStayInTheirView(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	a, b := n.create(t, tokAlice, nil), n.create(t, tokAlice, nil)
	alice := agent.ScopeOf(agent.Identity{UserID: "alice"})
	for i := range 51 { // 102 events: more than the view's first page
		model.Push(a.ID, scripted.Text(fmt.Sprintf("answer a%d", i)))
		_, err := n.rt.SendAndWait(ctx, a.ID, fmt.Sprintf("question a%d", i), alice)
		require.NoError(t, err)
	}
	model.Push(b.ID, scripted.Text("answer b"))
	_, err := n.rt.SendAndWait(ctx, b.ID, "question b", alice)
	require.NoError(t, err)

	// The page of a's older events waits for release.
	arrived, release := make(chan struct{}), make(chan struct{})
	var arrive, free sync.Once
	t.Cleanup(func() { free.Do(func() { close(release) }) })
	inner := *n.served.Load()
	var gated http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/conversations/"+a.ID+"/events" && r.URL.Query().Has("before") {
			arrive.Do(func() { close(arrived) })
			<-release
		}
		inner.ServeHTTP(w, r)
	})
	n.served.Store(&gated)

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokAlice, "#/c/"+a.ID)
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitVisible(chromedp.ID("log-older")),
		chromedp.Evaluate[chromedp.Void](`window.olderDone = document.getElementById('log-older').onclick(); undefined`),
	))
	select {
	case <-arrived:
	case <-ctx.Done():
		t.Fatal("the console did not ask for older events")
	}
	require.NoError(t, chromedp.Do(tab,
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = '#/c/%s'`, b.ID)),
		chromedp.WaitVisible(chromedp.Search(`//ol[@id="log"]/li[@data-kind="assistant_msg" and contains(., "answer b")]`)),
	))
	free.Do(func() { close(release) })
	_, err = chromedp.Run(tab, chromedp.Evaluate[chromedp.Void](`window.olderDone`, chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	log, err := chromedp.Run(tab, chromedp.Text(chromedp.ID("log")))
	require.NoError(t, err)
	require.NotContains(t, log, "question a")
	shown, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll('#log li[data-seq]').length`))
	require.NoError(t, err)
	require.Equal(t, 2, shown, "b's two events only")
}

// TestConsoleBadLinkOfAConversation: a link to a conversation whose id is
// not valid percent-encoding (#/c/%E0) opens the conversation view, which
// says it cannot load it: the route threw, leaving the previous view
// shown with its refreshes stopped.
func TestConsoleBadLinkOfAConversation(t *testing.T) {
	n := startNode(t, newScripted(), server.Options{})
	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokAlice, "#/calls")
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitVisible(chromedp.ID("calls-view")),
		chromedp.Evaluate[chromedp.Void](`location.hash = '#/c/%E0'`),
		chromedp.WaitVisible(chromedp.ID("conv-view")),
		chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and (contains(., "Could not load") or contains(., "No such conversation"))]`)),
	))
	title, err := chromedp.Run(tab, chromedp.Text(chromedp.ID("conv-title")))
	require.NoError(t, err)
	require.Equal(t, "%E0", title)
}

// TestConsoleFieldsHaveNames: every field of the console (the queue's
// included) has a name a screen reader reads: a label or aria-label, not
// a placeholder alone (the search box and the message box had none).
func TestConsoleFieldsHaveNames(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	_, call := suspendOnApproval(t, ctx, n, model)
	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokAlice, "#/calls")
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(cardSel(call.ID, " input.reason"))))
	unnamed, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`[...document.querySelectorAll('input, textarea, select')]
		.filter((f) => !(f.labels && f.labels.length) && !f.getAttribute('aria-label'))
		.map((f) => f.id || f.className)`))
	require.NoError(t, err)
	require.Empty(t, unnamed)
}

// TestConsoleDraftStaysWithItsConversation: the message box holds the
// draft of its own conversation: text typed in one conversation's view is
// not in the box of the next conversation opened (it was, and Send sent it
// there), and is back when the first is opened again; a send answered
// after its view was left does not empty the box of the view opened since.
func TestConsoleDraftStaysWithItsConversation(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	a, b := n.create(t, tokAlice, nil), n.create(t, tokAlice, nil)
	model.Push(a.ID, scripted.Text("ok"))

	// a's send waits for release.
	arrived, release := make(chan struct{}), make(chan struct{})
	var arrive, free sync.Once
	t.Cleanup(func() { free.Do(func() { close(release) }) })
	inner := *n.served.Load()
	var gated http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" && r.URL.Path == "/v1/conversations/"+a.ID+"/messages" {
			arrive.Do(func() { close(arrived) })
			<-release
		}
		inner.ServeHTTP(w, r)
	})
	n.served.Store(&gated)

	open := func(id string) chromedp.Action[chromedp.Void] {
		return chromedp.Steps(
			chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = '#/c/%s'`, id)),
			chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(`//h1[@id="conv-title" and .=%q]`, id))),
			chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "live")]`)),
		)
	}
	tb := newTab(t, browserWait)
	signIn(t, tb, n, tokAlice, "")
	require.NoError(t, chromedp.Do(tb, open(a.ID), chromedp.SendKeys(chromedp.ID("send-text"), "draft for a")))
	require.NoError(t, chromedp.Do(tb, open(b.ID)))
	value := func() string {
		v, err := chromedp.Run(tb, chromedp.Evaluate[string](`document.getElementById('send-text').value`))
		require.NoError(t, err)
		return v
	}
	require.Equal(t, "", value(), "a's draft is not in b's box")
	require.NoError(t, chromedp.Do(tb, open(a.ID)))
	require.Equal(t, "draft for a", value())

	// Sent from a, answered once b is open with a draft of its own.
	require.NoError(t, chromedp.Do(tb, chromedp.Evaluate[chromedp.Void](
		`window.sendDone = document.getElementById('send-form').onsubmit(new Event('submit', {cancelable: true})); undefined`)))
	select {
	case <-arrived:
	case <-ctx.Done():
		t.Fatal("the console did not send")
	}
	require.NoError(t, chromedp.Do(tb, open(b.ID), chromedp.SendKeys(chromedp.ID("send-text"), "draft for b")))
	free.Do(func() { close(release) })
	_, err := chromedp.Run(tb, chromedp.Evaluate[chromedp.Void](`window.sendDone`, chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	require.Equal(t, "draft for b", value(), "b's draft is kept")
	require.NoError(t, chromedp.Do(tb, open(a.ID)))
	require.Equal(t, "", value(), "a's sent draft is gone")
	evs, err := n.rt.History(ctx, a.ID, 0, 0)
	require.NoError(t, err)
	require.Equal(t, "draft for a", evs[0].GetUserMsg().GetContent()[0].GetText())
}

// TestConsoleSendsAMessageOnce: a message is written once however Send is
// pressed: twice while its request is in flight (a double click), and
// again after an answer that leaves the outcome unknown (504
// unknown_outcome, the message written), which goes with the same
// request_id. Each press sent a new request_id, so both wrote it twice.
// The unknown outcome is not shown as "Not sent".
func TestConsoleSendsAMessageOnce(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv := n.create(t, tokAlice, nil)
	path := "/v1/conversations/" + conv.ID + "/messages"

	// The first send waits for release; the second is written and
	// answered 504 unknown_outcome.
	var sends atomic.Int32
	arrived, release := make(chan struct{}), make(chan struct{})
	var free sync.Once
	t.Cleanup(func() { free.Do(func() { close(release) }) })
	inner := *n.served.Load()
	var gated http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != path {
			inner.ServeHTTP(w, r)
			return
		}
		switch sends.Add(1) {
		case 1:
			close(arrived)
			<-release
		case 2:
			inner.ServeHTTP(httptest.NewRecorder(), r)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusGatewayTimeout)
			_, _ = w.Write([]byte(`{"error":{"code":"unknown_outcome","message":"the outcome is unknown"}}`))
			return
		}
		inner.ServeHTTP(w, r)
	})
	n.served.Store(&gated)
	userMsgs := func() []string {
		evs, err := n.rt.History(ctx, conv.ID, 0, 0)
		require.NoError(t, err)
		var out []string
		for _, ev := range evs {
			if m := ev.GetUserMsg(); m != nil {
				out = append(out, m.GetContent()[0].GetText())
			}
		}
		return out
	}
	submit := `document.getElementById('send-form').onsubmit(new Event('submit', {cancelable: true}))`

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokAlice, "#/c/"+conv.ID)
	model.Push(conv.ID, scripted.Text("ok"), scripted.Text("ok"))
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "live")]`)),
		chromedp.SendKeys(chromedp.ID("send-text"), "one"),
		chromedp.Evaluate[chromedp.Void](`window.first = `+submit+`; undefined`),
	))
	select {
	case <-arrived:
	case <-ctx.Done():
		t.Fatal("the console did not send")
	}
	require.NoError(t, chromedp.Do(tab, chromedp.Evaluate[chromedp.Void](`window.second = `+submit+`; undefined`)))
	free.Do(func() { close(release) })
	_, err := chromedp.Run(tab, chromedp.Evaluate[chromedp.Void](`Promise.all([window.first, window.second])`, chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	require.Equal(t, []string{"one"}, userMsgs())

	require.NoError(t, chromedp.Do(tab,
		chromedp.SendKeys(chromedp.ID("send-text"), "two"),
		chromedp.Evaluate[chromedp.Void](submit, chromedp.EvalAwaitPromise),
		chromedp.WaitVisible(chromedp.Search(`//p[@id="send-error" and contains(., "unknown")]`)),
	))
	said, err := chromedp.Run(tab, chromedp.Text(chromedp.ID("send-error")))
	require.NoError(t, err)
	require.NotContains(t, said, "Not sent", "a send of unknown outcome may have been written")
	require.Contains(t, said, "may or may not have been sent")
	require.NoError(t, chromedp.Do(tab, chromedp.Evaluate[chromedp.Void](submit, chromedp.EvalAwaitPromise)))
	shown, err := chromedp.Run(tab, chromedp.Evaluate[[]string](
		`[document.getElementById('send-text').value, document.getElementById('send-error').textContent]`))
	require.NoError(t, err)
	require.Equal(t, []string{"", ""}, shown, "sent, with no error")
	require.Equal(t, []string{"one", "two"}, userMsgs())
}

// TestConsoleAnswerToAnExpiredCall: a call that expires while its card is
// shown is answered from the card as stale: the card says it expired, and
// the call stays expired. It held; the test pins it.
func TestConsoleAnswerToAnExpiredCall(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	_, call := suspendOnApproval(t, ctx, n, model)

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokCarol, "#/calls")
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(cardSel(call.ID, " button.approve"))))
	require.NoError(t, n.rt.Reschedule(ctx, call.ID, time.Now()))
	var shown server.Call
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n.must(c, http.StatusOK, "GET", "/v1/calls/"+call.ID, tokCarol, nil, &shown)
		assert.Equal(c, "expired", shown.Status)
	}, browserWait, 50*time.Millisecond)

	_, err := chromedp.Run(tab, chromedp.Evaluate[chromedp.Void](
		fmt.Sprintf(`answer(cards.get(%q), true)`, call.ID), chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.Search(
		fmt.Sprintf(`//article[@data-call-id=%q and @data-state="stale"]//p[@class="outcome" and contains(., "the call expired")]`, call.ID)))))
	n.must(t, http.StatusOK, "GET", "/v1/calls/"+call.ID, tokCarol, nil, &shown)
	require.Equal(t, "expired", shown.Status)
}

// TestConsoleAnswerToARewoundCall: a call that a rewind of its
// conversation took back while its card was open is shown as cancelled by
// the rewind, naming no one: it was "Already answered: rejected" (its
// status is "errored", as a rejection's).
func TestConsoleAnswerToARewoundCall(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv, call := suspendOnApproval(t, ctx, n, model)

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokCarol, "#/calls")
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(cardSel(call.ID, " button.approve"))))
	one := uint64(1)
	n.must(t, http.StatusOK, "POST", "/v1/conversations/"+conv.ID+"/rewind", tokAlice, server.RewindConversation{ToSeq: &one}, nil)

	_, err := chromedp.Run(tab, chromedp.Evaluate[chromedp.Void](
		fmt.Sprintf(`answer(cards.get(%q), true)`, call.ID), chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(
		`//article[@data-call-id=%q and @data-state="stale"]//p[@class="outcome" and contains(., "a rewind")]`, call.ID)))))
	outcome, err := chromedp.Run(tab, chromedp.Text(cardSel(call.ID, " .outcome")))
	require.NoError(t, err)
	require.Contains(t, outcome, "Cancelled")
	require.NotContains(t, outcome, "rejected")
	require.NotContains(t, outcome, " by ")
	var shown server.Call
	n.must(t, http.StatusOK, "GET", "/v1/calls/"+call.ID, tokCarol, nil, &shown)
	require.Equal(t, server.CallCancelled, shown.Outcome)
}

// TestConsoleResolutionLines: the line of a resolution event names who
// answered only when a person did: one with no resolver (an older log's,
// whose "by" is only "user") and an expiry (the system's) name no one; it
// was "resolution: errored by " with nothing after "by".
func TestConsoleResolutionLines(t *testing.T) {
	model := newScripted()
	n := startNode(t, model, server.Options{})
	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokCarol, "")
	heads := map[string]string{
		`{"seq":"5","resolution":{"tool_call_id":"c1","status":"TOOL_CALL_STATUS_ERRORED","by":"user"}}`:                                   "resolution: errored",
		`{"seq":"5","resolution":{"tool_call_id":"c1","status":"TOOL_CALL_STATUS_ERRORED","by":"user","resolver":{"user_id":"carol"}}}`:    "resolution: errored by carol",
		`{"seq":"5","resolution":{"tool_call_id":"c1","status":"TOOL_CALL_STATUS_RESOLVED","by":"user","resolver":{"user_id":"carol"}}}`:   "resolution: resolved by carol",
		`{"seq":"5","resolution":{"tool_call_id":"c1","status":"TOOL_CALL_STATUS_EXPIRED","by":"system","resolver":{"user_id":"system"}}}`: "resolution: expired",
		`{"seq":"5","resolution":{"tool_call_id":"c1"}}`:                                                                                   "resolution: unknown",
	}
	for ev, want := range heads {
		head, err := chromedp.Run(tab, chromedp.Evaluate[string](fmt.Sprintf(`describe(%s)[1]`, ev)))
		require.NoError(t, err)
		require.Equal(t, want, head, "event %s", ev)
	}
}

// TestConsoleAnswerRefusedByAProxy: an answer refused 502 with a body that
// is no API error and an empty status text (a proxy's page, over HTTP/2
// say) is shown as "Not answered: HTTP 502", the card pending with its
// buttons on: it said "Not answered: " and nothing more.
func TestConsoleAnswerRefusedByAProxy(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	_, call := suspendOnApproval(t, ctx, n, model)
	inner := *n.served.Load()
	var proxied http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/v1/calls/"+call.ID+"/resolve" {
			inner.ServeHTTP(w, r)
			return
		}
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		page := "<html>bad gateway</html>"
		// No reason phrase: the status text is empty, as over HTTP/2.
		_, _ = fmt.Fprintf(buf, "HTTP/1.1 502 \r\nContent-Type: text/html\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(page), page)
		_ = buf.Flush()
	})
	n.served.Store(&proxied)

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokCarol, "#/calls")
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(cardSel(call.ID, " button.approve"))))
	_, err := chromedp.Run(tab, chromedp.Evaluate[chromedp.Void](
		fmt.Sprintf(`answer(cards.get(%q), true)`, call.ID), chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	shown, err := chromedp.Run(tab, chromedp.Evaluate[[]string](fmt.Sprintf(
		`(() => { const c = cards.get(%q); return [c.outcome.textContent, c.state, String(c.approve.disabled)]; })()`, call.ID)))
	require.NoError(t, err)
	require.Equal(t, []string{"Not answered: HTTP 502", "pending", "false"}, shown)
	var got server.Call
	n.must(t, http.StatusOK, "GET", "/v1/calls/"+call.ID, tokCarol, nil, &got)
	require.Equal(t, "pending", got.Status)
}

// TestConsoleRoles: the queue shows a user what the package doc says they
// see, and no more: bob (no role, not the owner) sees no call; alice, the
// conversation's owner, sees its call but the tool wants an approver, so
// her Approve is refused (403) in the card, which stays pending with its
// buttons on, and the call stays pending. It held; tests only.
func TestConsoleRoles(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	_, call := suspendOnApproval(t, ctx, n, model)

	bob := newTab(t, browserWait)
	signIn(t, bob, n, tokBob, "#/calls")
	require.NoError(t, chromedp.Do(bob, chromedp.WaitVisible(chromedp.Search(`//p[@id="calls-status" and contains(., "No pending approvals")]`))))
	cards, err := chromedp.Run(bob, chromedp.Evaluate[int](`document.querySelectorAll('article.call').length`))
	require.NoError(t, err)
	require.Zero(t, cards)

	alice := newTab(t, browserWait)
	signIn(t, alice, n, tokAlice, "#/calls")
	require.NoError(t, chromedp.Do(alice,
		chromedp.WaitVisible(cardSel(call.ID, " button.approve")),
		chromedp.Click(cardSel(call.ID, " button.approve")),
		chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(`//article[@data-call-id=%q and @data-state="pending"]//p[@class="outcome" and contains(., "You may not answer this call")]`, call.ID))),
	))
	disabled, err := chromedp.Run(alice, chromedp.Evaluate[bool](
		fmt.Sprintf(`document.querySelector('article.call[data-call-id=%q] button.approve').disabled`, call.ID)))
	require.NoError(t, err)
	require.False(t, disabled)
	var shown server.Call
	n.must(t, http.StatusOK, "GET", "/v1/calls/"+call.ID, tokOlga, nil, &shown)
	require.Equal(t, "pending", shown.Status)
}

// TestConsoleShowsMarkupAsText: markup in a message, in a call's arguments
// and prompt, and in metadata is shown as text in the queue and the live
// view: no element is made of it. It held; tests only.
func TestConsoleShowsMarkupAsText(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	const markup = `<img src="x" class="injected"><b class="injected">bold</b>`
	conv := n.create(t, tokAlice, map[string]string{"note": markup})
	args, err := json.Marshal(map[string]string{"question": markup})
	require.NoError(t, err)
	model.Push(conv.ID, scripted.Reply(markup, scripted.Call("ask", string(args))))
	st := n.stream(t, ctx, tokAlice, conv.ID, "")
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice, server.SendMessage{Text: markup}, nil)
	st.until(t, "turn_end", `"suspended"`)
	st.close()
	var calls server.CallList
	n.must(t, http.StatusOK, "GET", "/v1/calls", tokAlice, nil, &calls)
	require.Len(t, calls.Calls, 1)

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokAlice, "#/calls")
	injected := func() int {
		k, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll('.injected, img').length`))
		require.NoError(t, err)
		return k
	}
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(`//article[@data-call-id=%q]//ol[@class="context"]/li[@data-kind="user_msg" and contains(., '<b class="injected">')]`, calls.Calls[0].ID))),
		chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(`//article[@data-call-id=%q]//pre[@class="args" and contains(., "<img")]`, calls.Calls[0].ID))),
	))
	require.Zero(t, injected())
	require.NoError(t, chromedp.Do(tab,
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = '#/c/%s'`, conv.ID)),
		chromedp.WaitVisible(chromedp.Search(`//ol[@id="log"]/li[@data-kind="assistant_msg" and contains(., '<b class="injected">')]`)),
		chromedp.WaitVisible(chromedp.Search(`//dl[@id="conv-meta"]/dd[contains(., "<img")]`)),
	))
	require.Zero(t, injected())
}

// TestConsoleQueueAcrossARestart: the queue open across a restart of the
// server goes on following the pending calls: a call answered after the
// restart is shown answered, by whom, and a call made since appears. It
// held; tests only.
func TestConsoleQueueAcrossARestart(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	model := newScripted()
	n := startNodeIn(t, dir, model, server.Options{})
	_, first := suspendOnApproval(t, ctx, n, model)

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokCarol, "#/calls")
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(cardSel(first.ID, " button.approve"))))

	n.restart(t, dir)
	n.must(t, http.StatusOK, "POST", "/v1/calls/"+first.ID+"/resolve", tokDave, map[string]any{"result": map[string]bool{"approved": true}}, nil)
	_, second := suspendOnApproval(t, ctx, n, model)
	_, err := chromedp.Run(tab, chromedp.Evaluate[chromedp.Void](`loadCalls()`, chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitVisible(cardSel(second.ID, `[data-state="pending"] button.approve`)),
		chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(`//article[@data-call-id=%q and @data-state="stale"]//p[contains(., "Already answered by dave")]`, first.ID))),
	))
}

// TestConsoleAnswerOfUnknownOutcome: an answer the server says may or may
// not have been recorded (504 unknown_outcome: here a gateway that lost
// the node's answer) is never shown as "Not answered". When it landed,
// the card reads the call again and says it was answered, by whom; when
// it did not, the card says the outcome is unknown and stays pending, its
// buttons on, and answering again records the answer.
func TestConsoleAnswerOfUnknownOutcome(t *testing.T) {
	for _, landed := range []bool{true, false} {
		t.Run(fmt.Sprintf("landed=%v", landed), func(t *testing.T) {
			ctx := testContext(t)
			model := newScripted()
			n := startNode(t, model, server.Options{})
			_, call := suspendOnApproval(t, ctx, n, model)
			inner := *n.served.Load()
			var cut atomic.Bool
			cut.Store(true)
			var proxied http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != "POST" || r.URL.Path != "/v1/calls/"+call.ID+"/resolve" || !cut.Load() {
					inner.ServeHTTP(w, r)
					return
				}
				cut.Store(false)
				if landed {
					rec := httptest.NewRecorder()
					inner.ServeHTTP(rec, r)
					if rec.Code != http.StatusOK {
						t.Errorf("resolve: %d %s", rec.Code, rec.Body)
					}
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusGatewayTimeout)
				_, _ = fmt.Fprint(w, `{"error":{"code":"unknown_outcome","message":"the write may or may not have happened: retry"}}`)
			})
			n.served.Store(&proxied)

			tab := newTab(t, browserWait)
			signIn(t, tab, n, tokCarol, "#/calls")
			require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(cardSel(call.ID, " button.approve"))))
			_, err := chromedp.Run(tab, chromedp.Evaluate[chromedp.Void](
				fmt.Sprintf(`answer(cards.get(%q), true)`, call.ID), chromedp.EvalAwaitPromise))
			require.NoError(t, err)
			shown, err := chromedp.Run(tab, chromedp.Evaluate[[]string](fmt.Sprintf(
				`(() => { const c = cards.get(%q); return [c.outcome.textContent, c.state, String(c.approve.disabled)]; })()`, call.ID)))
			require.NoError(t, err)
			require.NotContains(t, shown[0], "Not answered")
			if landed {
				require.Equal(t, []string{"Already answered by carol (approver).", "stale", "true"}, shown)
				return
			}
			require.Equal(t, []string{"Outcome unknown: the answer may or may not have been recorded. Answer again to find out.", "pending", "false"}, shown)
			require.NoError(t, chromedp.Do(tab, chromedp.Click(cardSel(call.ID, " button.approve")),
				chromedp.WaitVisible(cardSel(call.ID, `[data-state="approved"]`))))
			var got server.Call
			n.must(t, http.StatusOK, "GET", "/v1/calls/"+call.ID, tokCarol, nil, &got)
			require.Equal(t, "resolved", got.Status)
		})
	}
}

// cutAfter makes the tab's next POST to a path ending in suffix get no
// answer, as when the connection is cut: sent to the server first when
// landed, else not sent at all.
func cutAfter(suffix string, landed bool) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => {
  const real = window.fetch;
  let cut = false;
  window.fetch = async (url, init) => {
    if (!cut && init && init.method === 'POST' && String(url).endsWith(%q)) {
      cut = true;
      if (%v) await real(url, init);
      throw new TypeError('Failed to fetch');
    }
    return real(url, init);
  };
})()`, suffix, landed))
}

// TestConsoleAnswerWithNoAnswer: an Approve whose request gets no answer
// (the connection cut, the server having recorded it or not) is no "not
// answered": the card said "Not answered: the server cannot be reached"
// for an approval that was recorded. It now reads the call again and says
// it was answered, or that the outcome is unknown, and answering again
// answers once.
func TestConsoleAnswerWithNoAnswer(t *testing.T) {
	for _, landed := range []bool{true, false} {
		t.Run(fmt.Sprintf("landed=%v", landed), func(t *testing.T) {
			ctx := testContext(t)
			model := newScripted()
			n := startNode(t, model, server.Options{})
			_, call := suspendOnApproval(t, ctx, n, model)
			inner := *n.served.Load()
			var answers atomic.Int32
			var counted http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == "POST" && strings.HasPrefix(r.URL.Path, "/v1/calls/") {
					answers.Add(1)
				}
				inner.ServeHTTP(w, r)
			})
			n.served.Store(&counted)

			tab := newTab(t, browserWait)
			signIn(t, tab, n, tokCarol, "#/calls")
			require.NoError(t, chromedp.Do(tab,
				chromedp.WaitVisible(cardSel(call.ID, " button.approve")),
				cutAfter("/resolve", landed)))
			_, err := chromedp.Run(tab, chromedp.Evaluate[chromedp.Void](
				fmt.Sprintf(`answer(cards.get(%q), true)`, call.ID), chromedp.EvalAwaitPromise))
			require.NoError(t, err)
			shown, err := chromedp.Run(tab, chromedp.Evaluate[[]string](fmt.Sprintf(
				`(() => { const c = cards.get(%q); return [c.outcome.textContent, c.state, String(c.approve.disabled)]; })()`, call.ID)))
			require.NoError(t, err)
			require.NotContains(t, shown[0], "Not answered")
			if landed {
				require.Equal(t, []string{"Already answered by carol (approver).", "stale", "true"}, shown)
			} else {
				require.Equal(t, []string{"Outcome unknown (the server cannot be reached): the answer may or may not have been recorded. Answer again to find out.", "pending", "false"}, shown)
				require.NoError(t, chromedp.Do(tab, chromedp.Click(cardSel(call.ID, " button.approve")),
					chromedp.WaitVisible(cardSel(call.ID, `[data-state="approved"]`))))
			}
			require.Equal(t, int32(1), answers.Load())
			var got server.Call
			n.must(t, http.StatusOK, "GET", "/v1/calls/"+call.ID, tokCarol, nil, &got)
			require.Equal(t, server.CallAnswered, got.Outcome)
		})
	}
}

// TestConsoleAnswerTimedOutByAProxy: an Approve a proxy in front answers
// 504 with its own page (it gave up waiting, the server having recorded
// the answer) is no "not answered": the card said "Not answered: HTTP
// 504". It reads the call again and says it was answered.
func TestConsoleAnswerTimedOutByAProxy(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	_, call := suspendOnApproval(t, ctx, n, model)
	inner := *n.served.Load()
	var proxied http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/v1/calls/"+call.ID+"/resolve" {
			inner.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		inner.ServeHTTP(rec, r)
		if rec.Code != http.StatusOK {
			t.Errorf("resolve: %d %s", rec.Code, rec.Body)
		}
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusGatewayTimeout)
		_, _ = io.WriteString(w, "<html>gateway timeout</html>")
	})
	n.served.Store(&proxied)

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokCarol, "#/calls")
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(cardSel(call.ID, " button.approve"))))
	_, err := chromedp.Run(tab, chromedp.Evaluate[chromedp.Void](
		fmt.Sprintf(`answer(cards.get(%q), true)`, call.ID), chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	shown, err := chromedp.Run(tab, chromedp.Evaluate[[]string](fmt.Sprintf(
		`(() => { const c = cards.get(%q); return [c.outcome.textContent, c.state, String(c.approve.disabled)]; })()`, call.ID)))
	require.NoError(t, err)
	require.Equal(t, []string{"Already answered by carol (approver).", "stale", "true"}, shown)
}

// TestConsoleUnknownOutcomeButtonsWaitForTheRead: after an answer of
// unknown outcome, the card's buttons stay off while the call is read
// again: they were on at once, and a click then did nothing (the answer
// was still in flight).
func TestConsoleUnknownOutcomeButtonsWaitForTheRead(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	_, call := suspendOnApproval(t, ctx, n, model)
	inner := *n.served.Load()
	arrived, release := make(chan struct{}), make(chan struct{})
	var free sync.Once
	t.Cleanup(func() { free.Do(func() { close(release) }) })
	var held atomic.Bool
	var proxied http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "POST" && r.URL.Path == "/v1/calls/"+call.ID+"/resolve":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusGatewayTimeout)
			_, _ = io.WriteString(w, `{"error":{"code":"unknown_outcome","message":"the write may or may not have happened: retry"}}`)
			return
		case r.Method == "GET" && r.URL.Path == "/v1/calls/"+call.ID && held.CompareAndSwap(false, true):
			close(arrived)
			<-release
		}
		inner.ServeHTTP(w, r)
	})
	n.served.Store(&proxied)

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokCarol, "#/calls")
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitVisible(cardSel(call.ID, " button.approve")),
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`window.answered = answer(cards.get(%q), true); undefined`, call.ID)),
	))
	select {
	case <-arrived:
	case <-ctx.Done():
		t.Fatal("the call was not read again")
	}
	state := fmt.Sprintf(`(() => { const c = cards.get(%q); return [String(c.approve.disabled), String(c.reject.disabled)]; })()`, call.ID)
	during, err := chromedp.Run(tab, chromedp.Evaluate[[]string](state))
	require.NoError(t, err)
	require.Equal(t, []string{"true", "true"}, during)
	free.Do(func() { close(release) })
	_, err = chromedp.Run(tab, chromedp.Evaluate[chromedp.Void](`window.answered`, chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	after, err := chromedp.Run(tab, chromedp.Evaluate[[]string](state))
	require.NoError(t, err)
	require.Equal(t, []string{"false", "false"}, after)
}

// TestConsoleSendWithNoAnswer: a message whose send gets no answer (the
// connection cut after the server wrote it) is no "Not sent": the page
// said so of a message that was written. It now says the outcome is
// unknown, and sending again writes it once.
func TestConsoleSendWithNoAnswer(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv := n.create(t, tokAlice, nil)
	model.Push(conv.ID, scripted.Text("ok"))
	submit := `document.getElementById('send-form').onsubmit(new Event('submit', {cancelable: true}))`

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokAlice, "#/c/"+url.PathEscape(conv.ID))
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "live")]`)),
		cutAfter("/messages", true),
		chromedp.SendKeys(chromedp.ID("send-text"), "pay it"),
		chromedp.Evaluate[chromedp.Void](submit, chromedp.EvalAwaitPromise),
	))
	said, err := chromedp.Run(tab, chromedp.Text(chromedp.ID("send-error")))
	require.NoError(t, err)
	require.NotContains(t, said, "Not sent", "a send that got no answer may have been written")
	require.Contains(t, said, "may or may not have been sent")
	requireSentAgainOnce(t, ctx, tab, n, conv.ID, submit)
}

// TestConsoleAnswerToAGoneConversation: an answer refused 410 deleted
// (the tool's authorizer read the conversation, deleted meanwhile: see
// the package doc) says the call is gone, its buttons off, as a 404 does:
// the card said "Not answered" with its buttons on, for a call no one can
// answer again.
func TestConsoleAnswerToAGoneConversation(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	_, call := suspendOnApproval(t, ctx, n, model)
	inner := *n.served.Load()
	var proxied http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/v1/calls/"+call.ID+"/resolve" {
			inner.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusGone)
		_, _ = io.WriteString(w, `{"error":{"code":"deleted","message":"conversation deleted"}}`)
	})
	n.served.Store(&proxied)

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokCarol, "#/calls")
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(cardSel(call.ID, " button.approve"))))
	_, err := chromedp.Run(tab, chromedp.Evaluate[chromedp.Void](
		fmt.Sprintf(`answer(cards.get(%q), true)`, call.ID), chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	shown, err := chromedp.Run(tab, chromedp.Evaluate[[]string](fmt.Sprintf(
		`(() => { const c = cards.get(%q); return [c.outcome.textContent, c.state, String(c.approve.disabled)]; })()`, call.ID)))
	require.NoError(t, err)
	require.Equal(t, []string{"This call is gone (its conversation was deleted, or it is no longer visible to you).", "gone", "true"}, shown)
}

// TestConsoleKeyboardKeepsItsPlace: an Approve pressed with the keyboard
// leaves the focus in its card (on its outcome, which says what
// happened), so that Tab goes on to the next card: the button, turned
// off, dropped the focus to the top of the page.
func TestConsoleKeyboardKeepsItsPlace(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	_, call := suspendOnApproval(t, ctx, n, model)

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokCarol, "#/calls")
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitVisible(cardSel(call.ID, " button.approve")),
		chromedp.Focus(cardSel(call.ID, " button.approve")),
		chromedp.KeyEvent("\r"),
		chromedp.WaitVisible(cardSel(call.ID, `[data-state="approved"]`)),
	))
	focused, err := chromedp.Run(tab, chromedp.Evaluate[[]string](
		`[document.activeElement.className, (document.activeElement.closest('article') || {dataset: {}}).dataset.callId || '']`))
	require.NoError(t, err)
	require.Equal(t, []string{"outcome", call.ID}, focused)
}

// TestConsoleCountFollowsAnswers: the queue's count of pending calls
// moves as soon as a card is answered: it said "1 pending" after the only
// call was approved, until the next read of the queue.
func TestConsoleCountFollowsAnswers(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	_, call := suspendOnApproval(t, ctx, n, model)

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokCarol, "#/calls")
	require.NoError(t, chromedp.Do(tab,
		pendingStatus(1),
		// The poll is stopped: the count moves without a read.
		chromedp.Evaluate[chromedp.Void](`viewAbort.abort(); undefined`),
		chromedp.Click(cardSel(call.ID, " button.approve")),
		chromedp.WaitVisible(cardSel(call.ID, `[data-state="approved"]`)),
	))
	status, err := chromedp.Run(tab, chromedp.Text(chromedp.ID("calls-status")))
	require.NoError(t, err)
	require.Equal(t, "No pending approvals.", status)
}

// TestConsoleReasonStaysWithItsCard: a reason typed in a card, the queue
// left (to read the call's conversation) and shown again, is in the card
// again, and rejects with it: the queue was built anew, every reason
// typed lost.
func TestConsoleReasonStaysWithItsCard(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv, call := suspendOnApproval(t, ctx, n, model)

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokCarol, "#/calls")
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitVisible(cardSel(call.ID, " button.approve")),
		chromedp.SendKeys(cardSel(call.ID, " input.reason"), "over budget"),
		chromedp.Click(cardSel(call.ID, " a")),
		chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(`//h1[@id="conv-title" and .=%q]`, conv.ID))),
		chromedp.Evaluate[chromedp.Void](`history.back()`),
		chromedp.WaitVisible(cardSel(call.ID, " input.reason")),
	))
	reason, err := chromedp.Run(tab, chromedp.Value(cardSel(call.ID, " input.reason")))
	require.NoError(t, err)
	require.Equal(t, "over budget", reason)
	require.NoError(t, chromedp.Do(tab,
		chromedp.Click(cardSel(call.ID, " button.reject")),
		chromedp.WaitVisible(cardSel(call.ID, `[data-state="rejected"]`)),
	))
	var got server.Call
	n.must(t, http.StatusOK, "GET", "/v1/calls/"+call.ID, tokCarol, nil, &got)
	require.Equal(t, server.CallRejected, got.Outcome)
	require.Equal(t, "over budget", toolResult(t, ctx, n, conv.ID, call.ID))
}

// TestConsoleShowsArgumentsAsWritten: the card shows a call's arguments
// as the model wrote them: a number a JavaScript number cannot hold
// (an account number of 20 digits, 1.10) was shown rounded
// (12345678901234567000, 1.1), so an approver read another value than the
// one the tool gets.
func TestConsoleShowsArgumentsAsWritten(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	_, call := suspendOn(t, ctx, n, model, "approve", `{"account":12345678901234567891,"amount":1.10,"n":[7,-0.5e3]}`)

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokCarol, "#/calls")
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(cardSel(call.ID, " .args"))))
	args, err := chromedp.Run(tab, chromedp.Text(cardSel(call.ID, " .args")))
	require.NoError(t, err)
	require.Contains(t, args, `"account": 12345678901234567891`)
	require.Contains(t, args, `"amount": 1.10`)
	require.Contains(t, args, `-0.5e3`)
}

// TestConsoleDoubleClickAnswersOnce: two clicks on Approve (or Reject,
// then Approve) of a card, dispatched at once, send one answer, and the
// card says what that one did. It held; tests only.
func TestConsoleDoubleClickAnswersOnce(t *testing.T) {
	for _, clicks := range []string{"b.approve.click(); b.approve.click();", "b.reject.click(); b.approve.click();"} {
		t.Run(clicks, func(t *testing.T) {
			ctx := testContext(t)
			model := newScripted()
			n := startNode(t, model, server.Options{})
			_, call := suspendOnApproval(t, ctx, n, model)
			inner := *n.served.Load()
			var answers atomic.Int32
			var counted http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == "POST" && strings.HasPrefix(r.URL.Path, "/v1/calls/") {
					answers.Add(1)
				}
				inner.ServeHTTP(w, r)
			})
			n.served.Store(&counted)

			tab := newTab(t, browserWait)
			signIn(t, tab, n, tokCarol, "#/calls")
			require.NoError(t, chromedp.Do(tab,
				chromedp.WaitVisible(cardSel(call.ID, " button.approve")),
				chromedp.SendKeys(cardSel(call.ID, " input.reason"), "ok"),
				chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => { const b = cards.get(%q); %s })()`, call.ID, clicks)),
				chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(`//article[@data-call-id=%q and (@data-state="approved" or @data-state="rejected")]`, call.ID))),
			))
			state, err := chromedp.Run(tab, chromedp.Evaluate[string](fmt.Sprintf(`cards.get(%q).state`, call.ID)))
			require.NoError(t, err)
			var shown server.Call
			n.must(t, http.StatusOK, "GET", "/v1/calls/"+call.ID, tokCarol, nil, &shown)
			require.Equal(t, map[string]string{"approved": server.CallAnswered, "rejected": server.CallRejected}[state], shown.Outcome)
			require.Equal(t, int32(1), answers.Load())
		})
	}
}

// TestConsoleAnswerToADeletedConversation: a call whose conversation was
// deleted while its card was open is answered with Approve or Reject: the
// card says the call is gone, its buttons off, and nothing is recorded.
// It held; tests only.
func TestConsoleAnswerToADeletedConversation(t *testing.T) {
	for _, approve := range []bool{true, false} {
		t.Run(fmt.Sprint("approve=", approve), func(t *testing.T) {
			ctx := testContext(t)
			model := newScripted()
			n := startNode(t, model, server.Options{})
			conv, call := suspendOnApproval(t, ctx, n, model)

			tab := newTab(t, browserWait)
			signIn(t, tab, n, tokCarol, "#/calls")
			require.NoError(t, chromedp.Do(tab,
				chromedp.WaitVisible(cardSel(call.ID, " button.approve")),
				chromedp.SendKeys(cardSel(call.ID, " input.reason"), "fine"),
			))
			n.must(t, http.StatusNoContent, "DELETE", "/v1/conversations/"+conv.ID, tokAlice, nil, nil)
			_, err := chromedp.Run(tab, chromedp.Evaluate[chromedp.Void](
				fmt.Sprintf(`answer(cards.get(%q), %t)`, call.ID, approve), chromedp.EvalAwaitPromise))
			require.NoError(t, err)
			shown, err := chromedp.Run(tab, chromedp.Evaluate[[]string](fmt.Sprintf(
				`(() => { const c = cards.get(%q); return [c.state, c.outcome.textContent, String(c.approve.disabled), String(c.reject.disabled)]; })()`, call.ID)))
			require.NoError(t, err)
			require.Equal(t, []string{"gone", "This call is gone (its conversation was deleted, or it is no longer visible to you).", "true", "true"}, shown)
			status, _ := n.call(t, "GET", "/v1/calls/"+call.ID, tokCarol, nil)
			require.Equal(t, http.StatusNotFound, status)
		})
	}
}

// TestConsoleDotConversationIDs: a conversation whose id is "." or ".."
// (valid ids, which the API serves) cannot be reached from a browser,
// which takes such a path segment, escaped or not, for a step of the
// path. The console said "No such conversation" of one that exists, and
// its queue card "not visible to you" (or a TypeError, having read another
// route's answer); it now says a browser cannot address it, and sends
// nothing.
func TestConsoleDotConversationIDs(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	for _, id := range []string{".", ".."} {
		model.Push(id, scripted.Reply("asking", scripted.Call("approve", `{"amount":1}`)), scripted.Text("done"))
		end, err := n.rt.SendAndWait(ctx, id, "please", agent.ScopeOf(agent.Identity{UserID: "alice"}))
		require.NoError(t, err)
		require.Equal(t, lazarus.TurnSuspended, end.Outcome)
	}
	var calls server.CallList
	n.must(t, http.StatusOK, "GET", "/v1/calls", tokOlga, nil, &calls)
	require.Len(t, calls.Calls, 2)
	const said = `A browser cannot address a conversation whose id is "." or "..": read it over the API.`

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokOlga, "#/calls")
	for _, c := range calls.Calls {
		require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(
			`//article[@data-call-id=%q]//ol[@class="context"]/li[. = '%s']`, c.ID, said)))))
	}
	for _, id := range []string{".", ".."} {
		require.NoError(t, chromedp.Do(tab,
			chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = '#/c/' + encodeURIComponent(%q)`, id)),
			chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(`//span[@id="conv-live" and . = '%s']`, said))),
		))
		title, err := chromedp.Run(tab, chromedp.Text(chromedp.ID("conv-title")))
		require.NoError(t, err)
		require.Equal(t, id, title)
		disabled, err := chromedp.Run(tab, chromedp.Evaluate[bool](`document.getElementById('send-submit').disabled`))
		require.NoError(t, err)
		require.True(t, disabled)
	}
}

// TestConsoleCSPHoldsAndCovers: the console's Content-Security-Policy
// covers what it does (signing in, the queue with a card, a conversation
// live, the list) with no violation reported, and makes a string written
// as HTML throw: a slip that wrote a model's text with innerHTML would
// fail loudly instead of running what it holds.
func TestConsoleCSPHoldsAndCovers(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv, call := suspendOnApproval(t, ctx, n, model)

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokOlga, "")
	require.NoError(t, chromedp.Do(tab,
		chromedp.Evaluate[chromedp.Void](`window.violations = []; document.addEventListener('securitypolicyviolation', (e) => violations.push(e.violatedDirective + ' ' + e.blockedURI))`),
		chromedp.Evaluate[chromedp.Void](`location.hash = '#/conversations'`),
		chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(`//li[@data-conversation-id=%q]`, conv.ID))),
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = '#/c/' + encodeURIComponent(%q)`, conv.ID)),
		chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "live")]`)),
		chromedp.Evaluate[chromedp.Void](`location.hash = '#/calls'`),
		chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(`//article[@data-call-id=%q]//ol[@class="context"]/li`, call.ID))),
	))
	violations, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`violations`))
	require.NoError(t, err)
	require.Empty(t, violations)

	threw, err := chromedp.Run(tab, chromedp.Evaluate[string](`(() => {
		const d = document.createElement('div');
		try { d.innerHTML = '<img src=x onerror="window.ran = true">'; } catch (e) { return e.name; }
		return 'no error';
	})()`))
	require.NoError(t, err)
	require.Equal(t, "TypeError", threw)
	ran, err := chromedp.Run(tab, chromedp.Evaluate[bool](`window.ran === true`))
	require.NoError(t, err)
	require.False(t, ran)
}

// streamProxy stands in front of a node's handler for the GETs of one
// conversation's stream (see proxyStream).
type streamProxy struct {
	mu    sync.Mutex
	asked []time.Time // when each stream request came
	gates []chan struct{}
	once  []sync.Once
}

// proxyStream puts a streamProxy in front of what n serves: the GETs of
// conv's stream are numbered from 0 in the order they come, the time each
// came recorded, and handed to serve with the handler behind the proxy
// (serve passes on what it does not answer itself); every other request
// goes straight to that handler. Request i, for 1 <= i <= held, first
// waits until the test opens gate i-1, so that the test sees what the view
// shows meanwhile; if the request ends first, serve is not called. Every
// gate is opened when t ends, before the node closes.
func proxyStream(t *testing.T, n *node, conv string, held int, serve func(i int, inner http.Handler, w http.ResponseWriter, r *http.Request)) *streamProxy {
	t.Helper()
	p := &streamProxy{gates: make([]chan struct{}, held), once: make([]sync.Once, held)}
	for i := range p.gates {
		p.gates[i] = make(chan struct{})
	}
	t.Cleanup(func() { // on a failure, before the server closes
		for i := range p.gates {
			p.open(i)
		}
	})
	inner := *n.served.Load()
	var proxied http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "GET" || r.URL.Path != "/v1/conversations/"+conv+"/stream" {
			inner.ServeHTTP(w, r)
			return
		}
		p.mu.Lock()
		i := len(p.asked)
		p.asked = append(p.asked, time.Now())
		p.mu.Unlock()
		if i > 0 && i <= held {
			select {
			case <-p.gates[i-1]:
			case <-r.Context().Done():
				return
			}
		}
		serve(i, inner, w, r)
	})
	n.served.Store(&proxied)
	return p
}

// open lets the request held at gate i go on; opening it again does
// nothing.
func (p *streamProxy) open(i int) { p.once[i].Do(func() { close(p.gates[i]) }) }

// times returns when each stream request came, in order.
func (p *streamProxy) times() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.asked...)
}

// TestConsoleStreamAtTheSubscriptionCap: the live view's stream refused
// at the conversation's subscription cap (429 too_many_subscriptions,
// Retry-After) is asked for again after the Retry-After, not sooner, and
// the view says why it waits; one a cluster's owner refused (an error
// message of that code, after a 200) is asked for again after the
// server's RetryAfterTooManySubscriptions. The view asked again after one
// second whatever the Retry-After, saying only "reconnecting…", and took
// the error message for the stream's end for good ("stream ended").
func TestConsoleStreamAtTheSubscriptionCap(t *testing.T) {
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv := n.create(t, tokAlice, nil)
	const retryAfter = 2 * time.Second
	var (
		mu       sync.Mutex
		answered []time.Time // when each refusal was answered
	)
	// The view shows why it waits until the test has seen it.
	stream := proxyStream(t, n, conv.ID, 2, func(i int, inner http.Handler, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		answered = append(answered, time.Now())
		mu.Unlock()
		switch i {
		case 0:
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", fmt.Sprint(int(retryAfter/time.Second)))
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"error":{"code":"too_many_subscriptions","message":"too many subscriptions"}}`)
		case 1:
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "event: error\ndata: {\"error\":{\"code\":\"too_many_subscriptions\",\"message\":\"the owner refused\"}}\n\n")
		default:
			inner.ServeHTTP(w, r)
		}
	})

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokAlice, "#/c/"+conv.ID)
	waiting := chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "Too many streams of this conversation are open")]`))
	require.NoError(t, chromedp.Do(tab, waiting))
	stream.open(0)
	require.NoError(t, chromedp.Do(tab, waiting))
	stream.open(1)

	model.Push(conv.ID, scripted.Text("hello"))
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "live")]`))))
	n.must(t, http.StatusAccepted, "POST", "/v1/conversations/"+conv.ID+"/messages", tokAlice, server.SendMessage{Text: "hi"}, nil)
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.Search(`//ol[@id="log"]/li[@data-kind="assistant_msg" and contains(., "hello")]`))))

	asked := stream.times()
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, len(asked), 3)
	assert.GreaterOrEqual(t, asked[1].Sub(answered[0]), retryAfter-100*time.Millisecond, "asked again before the Retry-After")
	assert.GreaterOrEqual(t, asked[2].Sub(answered[1]), server.RetryAfterTooManySubscriptions*time.Second-100*time.Millisecond, "asked again before RetryAfterTooManySubscriptions")
}

// TestConsoleQueueReadsOutOfOrder: a read of the queue answered after a
// newer one (the poll's and Refresh's at once, say) is dropped. Its pages,
// read before the newer one's call was made, do not hold that call, and it
// took the call's card, pending, for one answered elsewhere: the card said
// "Not answered yet: it is pending." with its buttons off, for good.
func TestConsoleQueueReadsOutOfOrder(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	_, call := suspendOnApproval(t, ctx, n, model)

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokCarol, "#/calls")
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(cardSel(call.ID, " button.approve"))))

	// The next read of the list waits for release, and is answered as one
	// read before the call was made.
	inner := *n.served.Load()
	arrived, release := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	var free sync.Once
	t.Cleanup(func() { free.Do(func() { close(release) }) })
	var proxied http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "GET" || r.URL.Path != "/v1/calls" || !held.CompareAndSwap(false, true) {
			inner.ServeHTTP(w, r)
			return
		}
		close(arrived)
		<-release
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"calls":[]}`)
	})
	n.served.Store(&proxied)

	// The poll is stopped, so that the test makes the reads.
	_, err := chromedp.Run(tab, chromedp.Evaluate[chromedp.Void](`viewAbort.abort(); window.older = loadCalls(); undefined`))
	require.NoError(t, err)
	select {
	case <-arrived:
	case <-ctx.Done():
		t.Fatal("the first read never came")
	}
	_, err = chromedp.Run(tab, chromedp.Evaluate[chromedp.Void](`loadCalls()`, chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	free.Do(func() { close(release) })
	_, err = chromedp.Run(tab, chromedp.Evaluate[chromedp.Void](`window.older`, chromedp.EvalAwaitPromise))
	require.NoError(t, err)

	shown, err := chromedp.Run(tab, chromedp.Evaluate[[]string](fmt.Sprintf(
		`(() => { const c = cards.get(%q); return [c.state, c.outcome.textContent, String(c.approve.disabled)]; })()`, call.ID)))
	require.NoError(t, err)
	require.Equal(t, []string{"pending", "", "false"}, shown)
}

// TestConsoleOlderEventsOnce: two clicks on "Older events" at once put the
// older page at the top of the log once: each click read the same page,
// and both were put there, each of its events shown twice.
func TestConsoleOlderEventsOnce(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv := n.create(t, tokAlice, nil)
	alice := agent.ScopeOf(agent.Identity{UserID: "alice"})
	for i := range 51 { // 102 events: more than the view's first page
		model.Push(conv.ID, scripted.Text(fmt.Sprintf("answer %d", i)))
		_, err := n.rt.SendAndWait(ctx, conv.ID, fmt.Sprintf("question %d", i), alice)
		require.NoError(t, err)
	}

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokAlice, "#/c/"+conv.ID)
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.ID("log-older"))))
	_, err := chromedp.Run(tab, chromedp.Evaluate[chromedp.Void](
		`(() => { const b = document.getElementById('log-older'); return Promise.all([b.onclick(), b.onclick()]); })()`, chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	seqs, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#log li[data-seq]'), (li) => li.dataset.seq)`))
	require.NoError(t, err)
	want := make([]string, 102)
	for i := range want {
		want[i] = fmt.Sprint(i + 1)
	}
	require.Equal(t, want, seqs, "each event once, in order")
}

// TestConsoleStreamEndingAtOnceBacksOff: a stream that opens and ends at
// once (here with unavailable) is asked for again after a backoff that
// doubles (1s, then 2s); one that showed a new event starts it again from
// 1s. The backoff started again from 1s on every 200, so a stream that
// kept ending at once was asked for every second.
func TestConsoleStreamEndingAtOnceBacksOff(t *testing.T) {
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv := n.create(t, tokAlice, nil)
	const unavailable = "event: error\ndata: {\"error\":{\"code\":\"unavailable\",\"message\":\"unavailable\"}}\n\n"
	var (
		mu       sync.Mutex
		answered []time.Time // when each stream was ended
	)
	fourth := make(chan struct{})
	stream := proxyStream(t, n, conv.ID, 0, func(i int, inner http.Handler, w http.ResponseWriter, r *http.Request) {
		if i >= 3 {
			if i == 3 {
				close(fourth)
			}
			inner.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		if i == 2 { // a new event, then the end
			_, _ = io.WriteString(w, "event: event\nid: 1\ndata: {\"seq\":\"1\",\"user_msg\":{\"content\":[{\"text\":\"from the stream\"}]}}\n\n")
		}
		_, _ = io.WriteString(w, unavailable)
		mu.Lock()
		answered = append(answered, time.Now())
		mu.Unlock()
	})

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokAlice, "#/c/"+conv.ID)
	select {
	case <-fourth:
	case <-tab.Done():
		t.Fatal("the stream was not asked for a fourth time")
	}
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.Search(`//ol[@id="log"]/li[@data-kind="user_msg" and contains(., "from the stream")]`))))

	asked := stream.times()
	mu.Lock()
	defer mu.Unlock()
	const slack = 100 * time.Millisecond
	assert.GreaterOrEqual(t, asked[1].Sub(answered[0]), time.Second-slack, "first backoff")
	assert.GreaterOrEqual(t, asked[2].Sub(answered[1]), 2*time.Second-slack, "the backoff did not double after a stream that ended at once")
	// 1s, not the 4s it would have doubled to (bounded loosely for a
	// loaded machine).
	assert.Less(t, asked[3].Sub(answered[2]), 3*time.Second, "the backoff did not start again after a stream that showed an event")
}

// TestConsoleShowsWhyAStreamIsRefused: a stream refused with a 5xx, or a
// 429 other than the subscription cap's, is asked for again with the
// server's message shown: the view said only "reconnecting…", or that too
// many streams were open.
func TestConsoleShowsWhyAStreamIsRefused(t *testing.T) {
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv := n.create(t, tokAlice, nil)
	// The view shows why it waits until the test has seen it.
	stream := proxyStream(t, n, conv.ID, 2, func(i int, inner http.Handler, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch i {
		case 0:
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"code":"unavailable","message":"the store is down"}}`)
		case 1:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"error":{"code":"rate_limited","message":"slow down"}}`)
		default:
			inner.ServeHTTP(w, r)
		}
	})

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokAlice, "#/c/"+conv.ID)
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "the store is down: reconnecting…")]`))))
	stream.open(0)
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "slow down: trying again in 1s…")]`))))
	stream.open(1)
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "live")]`))))
}

// TestConsoleShowsWhyAStreamEnded: a stream the server ends with an error
// message it is read again after (lagged, closed) is asked for again with
// the server's message shown: the view said only "reconnecting…".
func TestConsoleShowsWhyAStreamEnded(t *testing.T) {
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv := n.create(t, tokAlice, nil)
	// The view shows why it waits until the test has seen it.
	stream := proxyStream(t, n, conv.ID, 2, func(i int, inner http.Handler, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		switch i {
		case 0:
			_, _ = io.WriteString(w, "event: error\ndata: {\"error\":{\"code\":\"lagged\",\"message\":\"you fell behind\"}}\n\n")
		case 1:
			_, _ = io.WriteString(w, "event: error\ndata: {\"error\":{\"code\":\"closed\",\"message\":\"the server is shutting down\"}}\n\n")
		default:
			inner.ServeHTTP(w, r)
		}
	})

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokAlice, "#/c/"+conv.ID)
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "you fell behind: reconnecting…")]`))))
	stream.open(0)
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "the server is shutting down: reconnecting…")]`))))
	stream.open(1)
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "live")]`))))
}

// TestConsoleShowsAStreamRefusedByAProxy: a stream refused with an answer
// that is no API error (a proxy's page of a 502 or a 429) is asked for
// again with the status shown, and one that got no answer at all says the
// server cannot be reached: the view said only "reconnecting…", and took
// the proxy's 429 for the subscription cap's.
func TestConsoleShowsAStreamRefusedByAProxy(t *testing.T) {
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv := n.create(t, tokAlice, nil)
	// What the stream's requests get moves on when the test has seen what
	// the view shows (by phase, not by request: a browser may send a
	// request whose connection closed without an answer again by itself).
	var phase atomic.Int32
	proxyStream(t, n, conv.ID, 0, func(_ int, inner http.Handler, w http.ResponseWriter, r *http.Request) {
		switch phase.Load() {
		case 0:
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, "<html><body>Bad Gateway</body></html>")
		case 1:
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			_ = conn.Close()
		case 2:
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, "<html><body>Too Many Requests</body></html>")
		default:
			inner.ServeHTTP(w, r)
		}
	})

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokAlice, "#/c/"+conv.ID)
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "server answered 502: reconnecting…")]`))))
	phase.Store(1)
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "cannot reach the server: reconnecting…")]`))))
	phase.Store(2)
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "server answered 429: trying again in 1s…")]`))))
	phase.Store(3)
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "live")]`))))
}

// TestConsoleStreamOpenLongBacksOffFromTheStart: a stream that stayed open
// STEADY_MS (10s) without a new event starts the backoff again from 1s
// when it ends. The page's clock is moved on while the stream is open, so
// the test does not wait the 10s.
func TestConsoleStreamOpenLongBacksOffFromTheStart(t *testing.T) {
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv := n.create(t, tokAlice, nil)
	const unavailable = "event: error\ndata: {\"error\":{\"code\":\"unavailable\",\"message\":\"unavailable\"}}\n\n"
	var (
		mu       sync.Mutex
		answered []time.Time // when each stream was ended
	)
	end, fourth := make(chan struct{}), make(chan struct{})
	var ended sync.Once
	t.Cleanup(func() { ended.Do(func() { close(end) }) })
	stream := proxyStream(t, n, conv.ID, 0, func(i int, inner http.Handler, w http.ResponseWriter, r *http.Request) {
		if i >= 3 {
			if i == 3 {
				close(fourth)
			}
			inner.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		if i == 2 { // open, with no event, until the test ends it
			w.WriteHeader(http.StatusOK)
			_ = http.NewResponseController(w).Flush()
			select {
			case <-end:
			case <-r.Context().Done():
				return
			}
		}
		_, _ = io.WriteString(w, unavailable)
		mu.Lock()
		answered = append(answered, time.Now())
		mu.Unlock()
	})

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokAlice, "#/c/"+conv.ID)
	// The third stream is open once the view says so (after two that ended
	// at once: the backoff is 4s now).
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "unavailable: reconnecting…")]`))))
	require.Eventually(t, func() bool { return len(stream.times()) == 3 }, browserWait, 10*time.Millisecond)
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "live")]`))))
	_, err := chromedp.Run(tab, chromedp.Evaluate[chromedp.Void](
		`(() => { const now = Date.now; Date.now = () => now.call(Date) + STEADY_MS; })()`))
	require.NoError(t, err)
	ended.Do(func() { close(end) })
	select {
	case <-fourth:
	case <-tab.Done():
		t.Fatal("the stream was not asked for a fourth time")
	}

	asked := stream.times()
	mu.Lock()
	defer mu.Unlock()
	// 1s, not the 4s it would have doubled to (bounded loosely for a
	// loaded machine).
	assert.GreaterOrEqual(t, asked[3].Sub(answered[2]), time.Second-100*time.Millisecond, "asked again before the backoff")
	assert.Less(t, asked[3].Sub(answered[2]), 3*time.Second, "the backoff did not start again after a stream open STEADY_MS")
}

// TestConsoleConversationIDsInLinks: conversations whose ids hold '/',
// '?', '#', '%', spaces or unicode are reached from their calls' cards,
// shown and written to under their own ids, each request naming the
// conversation, not another route. It held; tests only.
func TestConsoleConversationIDsInLinks(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	for _, id := range []string{"a/b?c=d#e", "100% é☃ /..", "%2F"} {
		model.Push(id, scripted.Reply("asking", scripted.Call("approve", `{"amount":3}`)), scripted.Text("done"))
		end, err := n.rt.SendAndWait(ctx, id, "pay", agent.ScopeOf(agent.Identity{UserID: "olga", Roles: []string{"operator"}}))
		require.NoError(t, err)
		require.Equal(t, lazarus.TurnSuspended, end.Outcome)
		var calls server.CallList
		n.must(t, http.StatusOK, "GET", "/v1/calls", tokOlga, nil, &calls)
		var call server.Call
		for _, c := range calls.Calls {
			if c.ConversationID == id {
				call = c
			}
		}
		require.Equal(t, id, call.ConversationID)

		t.Run(id, func(t *testing.T) {
			tab := newTab(t, browserWait)
			signIn(t, tab, n, tokOlga, "#/calls")
			require.NoError(t, chromedp.Do(tab,
				chromedp.WaitVisible(cardSel(call.ID, ` .context li[data-kind="suspension"]`)),
				chromedp.Click(cardSel(call.ID, " a")),
				chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "live")]`)),
			))
			shown, err := chromedp.Run(tab, chromedp.Evaluate[[]string](
				`[document.getElementById('conv-title').textContent, String(document.querySelectorAll('#log li[data-kind="user_msg"]').length)]`))
			require.NoError(t, err)
			require.Equal(t, []string{id, "1"}, shown)
			model.Push(id, scripted.Text("ok"))
			require.NoError(t, chromedp.Do(tab,
				chromedp.SendKeys(chromedp.ID("send-text"), "more"),
				chromedp.Click(chromedp.ID("send-submit")),
				chromedp.WaitVisible(chromedp.Search(`//ol[@id="log"]/li[@data-kind="user_msg"][2]`)),
			))
			require.Equal(t, []string{"pay", "more"}, userTexts(t, ctx, n, id))
		})
	}
}

// TestConsoleAnswerToAnEndedConversation: an answer refused 409 ended (the
// call is still pending, but its conversation has ended, so no answer can
// be recorded) says so, the card settled with its buttons off: it said
// "Not answered: ..." with its buttons on, for a call no one can answer.
func TestConsoleAnswerToAnEndedConversation(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	_, call := suspendOnApproval(t, ctx, n, model)
	inner := *n.served.Load()
	var proxied http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/v1/calls/"+call.ID+"/resolve" {
			inner.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_, _ = io.WriteString(w, `{"error":{"code":"ended","message":"the conversation was ended"}}`)
	})
	n.served.Store(&proxied)

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokCarol, "#/calls")
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(cardSel(call.ID, " button.approve")), pendingStatus(1)))
	_, err := chromedp.Run(tab, chromedp.Evaluate[chromedp.Void](
		fmt.Sprintf(`answer(cards.get(%q), true)`, call.ID), chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	shown, err := chromedp.Run(tab, chromedp.Evaluate[[]string](fmt.Sprintf(
		`(() => { const c = cards.get(%q); return [c.outcome.textContent, c.state, c.root.dataset.state, String(c.approve.disabled), String(c.reject.disabled), String(c.reason.disabled), document.getElementById('calls-status').textContent]; })()`, call.ID)))
	require.NoError(t, err)
	require.Equal(t, []string{"This call can no longer be answered: its conversation has ended.", "ended", "ended", "true", "true", "true", "No pending approvals."}, shown)
}

// paste puts text in the field sel as a paste does (an edit of the user's,
// which a maxLength cuts), not as a script's assignment.
func paste(sel chromedp.CSS, text string) chromedp.Action[chromedp.Void] {
	js, _ := json.Marshal(text)
	return chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
		`(() => { const f = document.querySelector(%q); f.focus(); document.execCommand('insertText', false, %s); })()`, string(sel), js))
}

// TestConsoleLongReason: a reason longer than 4000 characters, pasted in
// a card, was cut there without a word (the field's maxLength), though
// the server takes answers up to agent.MaxResultBytes. It now goes whole
// with an approval; a rejection's, which the server records cut to
// agent.MaxErrorBytes, goes whole and the card says it was recorded cut
// as it is (it said "to its first 4096 bytes": the record is at most
// 4096 bytes, ending in "...");
// and one the server would refuse is refused in the card, before anything
// is sent, its buttons on.
func TestConsoleLongReason(t *testing.T) {
	long := strings.Repeat("é", 2500) + strings.Repeat("x", 2500) // 5000 characters, 7500 bytes
	for _, c := range []struct {
		name, reason string
		approve      bool
		state, said  string
		answers      int32
	}{
		{"approve", long, true, "approved", "Approved.", 1},
		{"reject", long, false, "rejected", `Rejected. The reason was recorded cut to at most 4096 bytes, ending in "...", as every longer one is.`, 1},
		{"too long", strings.Repeat("x", agent.MaxResultBytes+1), false, "pending",
			fmt.Sprintf("The reason is too long: the answer would be %d bytes, and the server takes at most %d.", agent.MaxResultBytes+1, agent.MaxResultBytes), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := testContext(t)
			model := newScripted()
			n := startNode(t, model, server.Options{})
			conv, call := suspendOnApproval(t, ctx, n, model)
			inner := *n.served.Load()
			var answers atomic.Int32
			var counted http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == "POST" && strings.HasPrefix(r.URL.Path, "/v1/calls/") {
					answers.Add(1)
				}
				inner.ServeHTTP(w, r)
			})
			n.served.Store(&counted)

			tab := newTab(t, browserWait)
			signIn(t, tab, n, tokCarol, "#/calls")
			require.NoError(t, chromedp.Do(tab,
				chromedp.WaitVisible(cardSel(call.ID, " button.approve")),
				paste(cardSel(call.ID, " input.reason"), c.reason),
			))
			_, err := chromedp.Run(tab, chromedp.Evaluate[chromedp.Void](
				fmt.Sprintf(`answer(cards.get(%q), %t)`, call.ID, c.approve), chromedp.EvalAwaitPromise))
			require.NoError(t, err)
			shown, err := chromedp.Run(tab, chromedp.Evaluate[[]string](fmt.Sprintf(
				`(() => { const c = cards.get(%q); return [c.state, c.outcome.textContent, String(c.approve.disabled), String(c.reason.value.length)]; })()`, call.ID)))
			require.NoError(t, err)
			require.Equal(t, []string{c.state, c.said, strconv.FormatBool(c.state != "pending"), strconv.Itoa(utf16Len(c.reason))}, shown)
			require.Equal(t, c.answers, answers.Load())
			switch c.state {
			case "approved":
				var result struct {
					Approved bool   `json:"approved"`
					Reason   string `json:"reason"`
				}
				require.NoError(t, json.Unmarshal([]byte(toolResult(t, ctx, n, conv.ID, call.ID)), &result))
				require.Equal(t, c.reason, result.Reason, "the reason went whole")
			case "rejected":
				got := toolResult(t, ctx, n, conv.ID, call.ID)
				require.True(t, strings.HasPrefix(c.reason, strings.TrimSuffix(got, "...")), "recorded: %q", got)
				require.Less(t, len(got), len(c.reason))
				require.LessOrEqual(t, len(got), agent.MaxErrorBytes, "as the card says")
				require.True(t, strings.HasSuffix(got, "..."), "as the card says: %q", got[len(got)-10:])
			default:
				var got server.Call
				n.must(t, http.StatusOK, "GET", "/v1/calls/"+call.ID, tokCarol, nil, &got)
				require.Equal(t, "pending", got.Status)
			}
			bounds, err := chromedp.Run(tab, chromedp.Evaluate[[]int](`[MAX_RESULT_BYTES, MAX_ERROR_BYTES]`))
			require.NoError(t, err)
			require.Equal(t, []int{agent.MaxResultBytes, agent.MaxErrorBytes}, bounds, "the console's bounds are the server's")
		})
	}
}

func utf16Len(s string) int { return len(utf16.Encode([]rune(s))) }

// giveUpFirst makes the page give up, after 200ms, the first bounded
// request of method to the API path prefix+enc(id)+suffix (the request a
// test leaves hanging), and no other: every other request keeps
// answerTimeoutMS, so one the test expects answered is never given up on
// a loaded machine (a short answerTimeoutMS for all could).
func giveUpFirst(method, prefix, id, suffix string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => {
  const real = api;
  let first = true;
  api = (method, path, body, timeoutMS) => {
    const short = first && Boolean(timeoutMS) && method === %q && path === %q + enc(%q) + %q;
    if (short) first = false;
    return real(method, path, body, short ? 200 : timeoutMS);
  };
})()`, method, prefix, id, suffix))
}

// TestConsoleAnswerWithNoAnswerInTime: an Approve whose request hangs (a
// server or proxy that never answers) showed "Sending…" for good, its card
// skipped by the queue's reads. The request is now given up after
// answerTimeoutMS (shorter here, for that request) and the answer's outcome is unknown:
// the card reads the call again and says it was answered if it was, else
// that the outcome is unknown, and answering again answers once.
func TestConsoleAnswerWithNoAnswerInTime(t *testing.T) {
	for _, landed := range []bool{true, false} {
		t.Run(fmt.Sprintf("landed=%v", landed), func(t *testing.T) {
			ctx := testContext(t)
			model := newScripted()
			n := startNode(t, model, server.Options{})
			_, call := suspendOnApproval(t, ctx, n, model)
			inner := *n.served.Load()
			release := make(chan struct{})
			var free sync.Once
			t.Cleanup(func() { free.Do(func() { close(release) }) })
			var hung atomic.Bool
			var answers atomic.Int32
			var proxied http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != "POST" || r.URL.Path != "/v1/calls/"+call.ID+"/resolve" {
					inner.ServeHTTP(w, r)
					return
				}
				answers.Add(1)
				if !hung.CompareAndSwap(false, true) {
					inner.ServeHTTP(w, r)
					return
				}
				if landed {
					rec := httptest.NewRecorder()
					inner.ServeHTTP(rec, r)
					if rec.Code != http.StatusOK {
						t.Errorf("resolve: %d %s", rec.Code, rec.Body)
					}
				}
				select { // no answer, until the test ends or the page gives up
				case <-release:
				case <-r.Context().Done():
				}
			})
			n.served.Store(&proxied)

			tab := newTab(t, browserWait)
			signIn(t, tab, n, tokCarol, "#/calls")
			require.NoError(t, chromedp.Do(tab,
				chromedp.WaitVisible(cardSel(call.ID, " button.approve")),
				giveUpFirst("POST", "calls/", call.ID, "/resolve"),
			))
			// Bounded: without a bound on the request, the answer never ends.
			wait, cancel := context.WithTimeout(tab, 20*time.Second)
			defer cancel()
			_, err := chromedp.Run(wait, chromedp.Evaluate[chromedp.Void](
				fmt.Sprintf(`answer(cards.get(%q), true)`, call.ID), chromedp.EvalAwaitPromise))
			require.NoError(t, err, "the answer did not end")
			shown, err := chromedp.Run(tab, chromedp.Evaluate[[]string](fmt.Sprintf(
				`(() => { const c = cards.get(%q); return [c.outcome.textContent, c.state, String(c.approve.disabled), String(c.busy)]; })()`, call.ID)))
			require.NoError(t, err)
			if landed {
				require.Equal(t, []string{"Already answered by carol (approver).", "stale", "true", "false"}, shown)
			} else {
				require.Equal(t, []string{"Outcome unknown (no answer came within 0.2s): the answer may or may not have been recorded. Answer again to find out.", "pending", "false", "false"}, shown)
				require.NoError(t, chromedp.Do(tab,
					chromedp.Click(cardSel(call.ID, " button.approve")),
					chromedp.WaitVisible(cardSel(call.ID, `[data-state="approved"]`))))
			}
			require.Equal(t, map[bool]int32{true: 1, false: 2}[landed], answers.Load())
			var got server.Call
			n.must(t, http.StatusOK, "GET", "/v1/calls/"+call.ID, tokCarol, nil, &got)
			require.Equal(t, server.CallAnswered, got.Outcome)
		})
	}
}

// TestConsoleEnterRejects: Enter in a card's reason field rejects the
// call with that reason (it did nothing); with no reason it asks for one
// and sends nothing. Enter never approves.
func TestConsoleEnterRejects(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	conv, call := suspendOnApproval(t, ctx, n, model)
	inner := *n.served.Load()
	var answers atomic.Int32
	var counted http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" && strings.HasPrefix(r.URL.Path, "/v1/calls/") {
			answers.Add(1)
		}
		inner.ServeHTTP(w, r)
	})
	n.served.Store(&counted)

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokCarol, "#/calls")
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitVisible(cardSel(call.ID, " button.approve")),
		chromedp.SendKeys(cardSel(call.ID, " input.reason"), "\r"),
		chromedp.WaitVisible(chromedp.Search(fmt.Sprintf(`//article[@data-call-id=%q]//p[@class="outcome" and .="Give a reason to reject."]`, call.ID))),
	))
	require.Equal(t, int32(0), answers.Load(), "an empty reason was sent")
	require.NoError(t, chromedp.Do(tab,
		chromedp.SendKeys(cardSel(call.ID, " input.reason"), "not this week\r"),
		chromedp.WaitVisible(cardSel(call.ID, `[data-state="rejected"]`)),
	))
	require.Equal(t, int32(1), answers.Load())
	var got server.Call
	n.must(t, http.StatusOK, "GET", "/v1/calls/"+call.ID, tokCarol, nil, &got)
	require.Equal(t, server.CallRejected, got.Outcome)
	require.Equal(t, "not this week", toolResult(t, ctx, n, conv.ID, call.ID))
}

// hangCallReads makes every GET of call's own resource (not the queue's
// listing) get no answer until the test ends or the page gives it up.
func hangCallReads(t *testing.T, n *node, callID string, answerCode int, answerBody string) {
	t.Helper()
	release := make(chan struct{})
	var free sync.Once
	t.Cleanup(func() { free.Do(func() { close(release) }) })
	inner := *n.served.Load()
	var proxied http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "POST" && r.URL.Path == "/v1/calls/"+callID+"/resolve":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(answerCode)
			_, _ = io.WriteString(w, answerBody)
		case r.Method == "GET" && r.URL.Path == "/v1/calls/"+callID:
			select {
			case <-release:
			case <-r.Context().Done():
			}
		default:
			inner.ServeHTTP(w, r)
		}
	})
	n.served.Store(&proxied)
}

// TestConsoleCallReadsWithNoAnswerInTime: the reads of a call that follow
// an answer (after an unknown outcome, after a stale one) and the queue's
// read of a card its pages no longer hold had no bound: a read that hung
// left the card busy, its buttons off, for good. They are now given up
// after answerTimeoutMS (shorter here, for the read that hangs; the answer
// keeps the default, as it must be answered): an unknown outcome stays unknown, its buttons on
// again; an answer found stale stays "Already answered"; a card read again
// by the queue is left as it was.
func TestConsoleCallReadsWithNoAnswerInTime(t *testing.T) {
	for _, tc := range []struct {
		name, code, run string
		status          int
		want            []string
	}{
		{"unknown outcome", "unknown_outcome", `answer(cards.get(%q), true)`, http.StatusGatewayTimeout,
			[]string{"Outcome unknown: the answer may or may not have been recorded. Answer again to find out.", "pending", "false", "false"}},
		{"stale", "stale", `answer(cards.get(%q), true)`, http.StatusConflict,
			[]string{"Already answered.", "stale", "true", "false"}},
		{"recheck", "", `recheck(cards.get(%q))`, http.StatusOK,
			[]string{"", "pending", "false", "false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			model := newScripted()
			n := startNode(t, model, server.Options{})
			_, call := suspendOnApproval(t, ctx, n, model)
			hangCallReads(t, n, call.ID, tc.status, fmt.Sprintf(`{"error":{"code":%q,"message":"said so"}}`, tc.code))

			tab := newTab(t, browserWait)
			signIn(t, tab, n, tokCarol, "#/calls")
			require.NoError(t, chromedp.Do(tab,
				chromedp.WaitVisible(cardSel(call.ID, " button.approve")),
				giveUpFirst("GET", "calls/", call.ID, ""),
			))
			// Bounded: without a bound on the read, it never ends.
			wait, cancel := context.WithTimeout(tab, 20*time.Second)
			defer cancel()
			_, err := chromedp.Run(wait, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(tc.run, call.ID), chromedp.EvalAwaitPromise))
			require.NoError(t, err, "the read did not end")
			shown, err := chromedp.Run(tab, chromedp.Evaluate[[]string](fmt.Sprintf(
				`(() => { const c = cards.get(%q); return [c.outcome.textContent, c.state, String(c.approve.disabled), String(c.busy)]; })()`, call.ID)))
			require.NoError(t, err)
			require.Equal(t, tc.want, shown)
		})
	}
}

// TestConsoleSendWithNoAnswerInTime: a message whose send hangs (a server
// or proxy that never answers) kept Send off for good. The send is now
// given up after answerTimeoutMS (set shorter here), said to be of unknown
// outcome, Send on again; sending again (the same request_id) writes the
// message once, whether the hung send was written or not.
func TestConsoleSendWithNoAnswerInTime(t *testing.T) {
	for _, landed := range []bool{true, false} {
		t.Run(fmt.Sprintf("landed=%v", landed), func(t *testing.T) {
			ctx := testContext(t)
			model := newScripted()
			n := startNode(t, model, server.Options{})
			conv := n.create(t, tokAlice, nil)
			model.Push(conv.ID, scripted.Text("ok"))
			path := "/v1/conversations/" + conv.ID + "/messages"
			release := make(chan struct{})
			var free sync.Once
			t.Cleanup(func() { free.Do(func() { close(release) }) })
			var hung atomic.Bool
			inner := *n.served.Load()
			var proxied http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != "POST" || r.URL.Path != path || !hung.CompareAndSwap(false, true) {
					inner.ServeHTTP(w, r)
					return
				}
				if landed {
					rec := httptest.NewRecorder()
					inner.ServeHTTP(rec, r)
					if rec.Code/100 != 2 {
						t.Errorf("send: %d %s", rec.Code, rec.Body)
					}
				}
				select { // no answer, until the test ends or the page gives up
				case <-release:
				case <-r.Context().Done():
				}
			})
			n.served.Store(&proxied)
			submit := `document.getElementById('send-form').onsubmit(new Event('submit', {cancelable: true}))`

			tab := newTab(t, browserWait)
			signIn(t, tab, n, tokAlice, "#/c/"+url.PathEscape(conv.ID))
			require.NoError(t, chromedp.Do(tab,
				chromedp.WaitVisible(chromedp.Search(`//span[@id="conv-live" and contains(., "live")]`)),
				chromedp.Evaluate[chromedp.Void](`answerTimeoutMS = 200`),
				chromedp.SendKeys(chromedp.ID("send-text"), "pay it"),
			))
			// Bounded: without a bound on the send, it never ends.
			wait, cancel := context.WithTimeout(tab, 20*time.Second)
			defer cancel()
			_, err := chromedp.Run(wait, chromedp.Evaluate[chromedp.Void](submit, chromedp.EvalAwaitPromise))
			require.NoError(t, err, "the send did not end")
			shown, err := chromedp.Run(tab, chromedp.Evaluate[[]string](
				`[document.getElementById('send-error').textContent, String(document.getElementById('send-submit').disabled), document.getElementById('send-text').value]`))
			require.NoError(t, err)
			require.Equal(t, []string{"Outcome unknown: the message may or may not have been sent; send again to make sure (it is not written twice): no answer came within 0.2s", "false", "pay it"}, shown)
			require.NoError(t, chromedp.Do(tab, chromedp.Evaluate[chromedp.Void](`answerTimeoutMS = 60000`)))
			requireSentAgainOnce(t, ctx, tab, n, conv.ID, submit)
		})
	}
}

// TestConsoleEndedCallStaysEnded: a call an answer found pending in an
// ended conversation (409 ended), which the API still lists (until its
// deadline expires it), came back as a pending card, its buttons on, when
// the queue was shown again. Its card is now shown as ended, and the
// count leaves it out.
func TestConsoleEndedCallStaysEnded(t *testing.T) {
	ctx := testContext(t)
	model := newScripted()
	n := startNode(t, model, server.Options{})
	_, call := suspendOnApproval(t, ctx, n, model)
	inner := *n.served.Load()
	var proxied http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/v1/calls/"+call.ID+"/resolve" {
			inner.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_, _ = io.WriteString(w, `{"error":{"code":"ended","message":"the conversation was ended"}}`)
	})
	n.served.Store(&proxied)

	tab := newTab(t, browserWait)
	signIn(t, tab, n, tokCarol, "#/calls")
	require.NoError(t, chromedp.Do(tab,
		chromedp.WaitVisible(cardSel(call.ID, " button.approve")), pendingStatus(1),
		chromedp.Click(cardSel(call.ID, " button.approve")),
		chromedp.WaitVisible(cardSel(call.ID, `[data-state="ended"]`)),
		chromedp.Evaluate[chromedp.Void](`location.hash = '#/conversations'`),
		chromedp.WaitVisible(chromedp.ID("convs-view")),
		chromedp.Evaluate[chromedp.Void](`location.hash = '#/calls'`),
		chromedp.WaitVisible(chromedp.Search(`//p[@id="calls-status" and .="No pending approvals."]`)),
	))
	shown, err := chromedp.Run(tab, chromedp.Evaluate[[]string](fmt.Sprintf(
		`(() => { const c = cards.get(%q); return [c.outcome.textContent, c.state, c.root.dataset.state, String(c.approve.disabled), String(c.reject.disabled), String(c.reason.disabled)]; })()`, call.ID)))
	require.NoError(t, err)
	require.Equal(t, []string{"This call can no longer be answered: its conversation has ended.", "ended", "ended", "true", "true", "true"}, shown)
}

// userTexts returns the texts of the user messages in conversation conv's
// history on node n, in order.
func userTexts(t *testing.T, ctx context.Context, n *node, conv string) []string {
	t.Helper()
	evs, err := n.rt.History(ctx, conv, 0, 0)
	require.NoError(t, err)
	var sent []string
	for _, ev := range evs {
		if m := ev.GetUserMsg(); m != nil {
			sent = append(sent, m.GetContent()[0].GetText())
		}
	}
	return sent
}

// requireSentAgainOnce sends "pay it" again in tab (submit submits the
// conversation view's form) after a send of unknown outcome, and checks
// that the form is cleared with no error and that conversation conv on
// node n holds the message once.
func requireSentAgainOnce(t *testing.T, ctx context.Context, tab context.Context, n *node, conv, submit string) {
	t.Helper()
	require.NoError(t, chromedp.Do(tab, chromedp.Evaluate[chromedp.Void](submit, chromedp.EvalAwaitPromise)))
	shown, err := chromedp.Run(tab, chromedp.Evaluate[[]string](
		`[document.getElementById('send-text').value, document.getElementById('send-error').textContent]`))
	require.NoError(t, err)
	require.Equal(t, []string{"", ""}, shown, "sent, with no error")
	require.Equal(t, []string{"pay it"}, userTexts(t, ctx, n, conv))
}
