package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/journal"
)

// load sends messages to convs through the live nodes until stopped, and
// records every acknowledged send and how every other call ended.
type load struct {
	c     *testCluster
	convs []string
	dead  sync.Map // *node -> true: not sent to
	acked sync.Map // request id -> conversation
	n     atomic.Int64
	stop  chan struct{}
	wg    sync.WaitGroup

	mu    sync.Mutex
	codes map[string]int // failed calls the control API answered, by code
	// unreached counts calls that got no answer from a node being taken
	// down (its control API closed under them: they never reached its
	// Runtime, or their answer was cut off with the process).
	unreached int
	// draining counts the sends a node being taken down acknowledged.
	draining int
	// bad lists calls that failed without a sentinel, or got no answer
	// from a node that stayed up.
	bad []string
}

func startLoad(c *testCluster, convs []string, workers int) *load {
	l := &load{c: c, convs: convs, stop: make(chan struct{}), codes: map[string]int{}}
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				ci, ni := pick(w, i, workers, len(convs), len(c.nodes))
				conv, nd := convs[ci], c.nodes[ni]
				downs := nd.downs.Load()
				if _, dead := l.dead.Load(nd); dead {
					continue
				}
				text := "hello"
				if i%3 == 1 {
					text = "tool: x"
				}
				id := fmt.Sprintf("w%d-%d", w, i)
				_, err := nd.send(conv, text, id)
				if err == nil {
					l.acked.Store(id, conv)
					l.n.Add(1)
					if nd.stopping.Load() {
						l.mu.Lock()
						l.draining++
						l.mu.Unlock()
					}
					continue
				}
				l.failed(nd, downs, id, err)
			}
		}()
	}
	return l
}

// pick returns the conversation and the member (indexes) of worker w's
// i-th send. The member moves on by one more every len(nodes) sends: by
// (w+i) alone, a conversation whose period in i shares a factor with the
// number of members (12 conversations, 4 workers, 3 members) was sent to
// through one member only, and one whose member the test paused could go
// without any acknowledged send at all (TestPausedNodeIsFenced failed so
// once: p8's log was empty when every turn was awaited).
func pick(w, i, workers, convs, nodes int) (conv, node int) {
	return (w + i*workers) % convs, (w + i + i/nodes) % nodes
}

// finish waits until every conversation of the load has an acknowledged
// send (a conversation the load never wrote proves nothing, and owes no
// answer), then stops the load.
func (l *load) finish() {
	t := l.c.t
	t.Helper()
	unsent := func() []string {
		sent := map[string]bool{}
		l.acked.Range(func(_, v any) bool {
			sent[v.(string)] = true
			return true
		})
		var out []string
		for _, conv := range l.convs {
			if !sent[conv] {
				out = append(out, conv)
			}
		}
		return out
	}
	if !assert.Eventually(t, func() bool { return len(unsent()) == 0 }, 60*time.Second, 20*time.Millisecond) {
		close(l.stop)
		l.wg.Wait()
		require.FailNow(t, fmt.Sprintf("conversations the load never had a send acknowledged for: %v", unsent()))
	}
	close(l.stop)
	l.wg.Wait()
}

// down stops sending to nd (before the test kills or pauses it).
func (l *load) down(nd *node) {
	nd.downs.Add(1)
	nd.stopping.Store(true)
	l.dead.Store(nd, true)
}

// drain says nd is about to be stopped, but goes on sending to it until a
// call finds its control API closed: the calls in flight when it gets
// SIGTERM must be answered.
func (l *load) drain(nd *node) {
	nd.downs.Add(1)
	nd.stopping.Store(true)
}

// up sends to nd again.
func (l *load) up(nd *node) {
	nd.stopping.Store(false)
	l.dead.Delete(nd)
}

// failed records a call through nd that did not succeed; downs is nd's
// count of downs before the call.
func (l *load) failed(nd *node, downs int64, id string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ce *callError
	switch {
	case errors.As(err, &ce):
		l.codes[ce.Code]++
		if !sentinels[ce.Code] {
			l.bad = append(l.bad, fmt.Sprintf("%s through %s: no sentinel: %v", id, nd.addr, err))
		}
	case nd.stopping.Load() || nd.downs.Load() != downs:
		l.unreached++
		l.dead.Store(nd, true) // until up
	default:
		l.bad = append(l.bad, fmt.Sprintf("%s through %s (up): no answer: %v", id, nd.addr, err))
	}
}

// checkFailures checks that every call that did not succeed failed with a
// sentinel, or met a node being taken down, and logs how they ended.
func (l *load) checkFailures(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Logf("%d sends acknowledged (%d by a node being taken down); failed with a sentinel: %v; no answer from a node taken down: %d",
		l.n.Load(), l.draining, l.codes, l.unreached)
	require.Empty(t, l.bad, "calls that failed without a sentinel")
}

// checkAcked checks that every acknowledged send is in its conversation's
// log, once, and that every log is gap-free and ends answered.
func (l *load) checkAcked(t *testing.T, st journal.Store) {
	t.Helper()
	logs := map[string]map[string]bool{}
	for _, conv := range l.convs {
		ids := map[string]bool{}
		for _, ev := range checkLog(t, st, conv) {
			if ev.GetUserMsg() != nil {
				ids[ev.GetRequestId()] = true
			}
		}
		logs[conv] = ids
	}
	lost := 0
	l.acked.Range(func(k, v any) bool {
		if !logs[v.(string)][k.(string)] {
			lost++
		}
		return true
	})
	require.Zero(t, lost, "acknowledged sends missing from the logs")
}

// waitAnswered waits until every conversation's log ends with an answer.
// If one never does, it says which, with the end of its log and its row.
func waitAnswered(t *testing.T, st journal.Store, convs []string) {
	t.Helper()
	answered := func(conv string) bool {
		evs, err := st.Events(context.Background(), conv, journal.EventQuery{Limit: 1})
		return err == nil && len(evs) == 1 && evs[0].GetAssistantMsg() != nil && len(evs[0].GetAssistantMsg().GetToolCalls()) == 0
	}
	if assert.Eventually(t, func() bool { return !slices.ContainsFunc(convs, func(c string) bool { return !answered(c) }) },
		60*time.Second, 100*time.Millisecond) {
		return
	}
	for _, conv := range convs {
		if answered(conv) {
			continue
		}
		evs, err := st.Events(context.Background(), conv, journal.EventQuery{Limit: 4})
		row, rerr := st.Conversation(context.Background(), conv)
		var ends []string
		for _, ev := range evs {
			ends = append(ends, fmt.Sprintf("%d:%T(req %s)", ev.GetSeq(), ev.GetBody(), ev.GetRequestId()))
		}
		t.Logf("%s never finished its turn: log ends %v (%v); row status %v (%v)", conv, ends, err, row.GetStatus(), rerr)
	}
	require.FailNow(t, "conversations never finished their turns")
}

func convIDs(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// TestKillNodeUnderLoad kills one of three nodes with SIGKILL under load
// (mid-turn: every model call takes 200ms): its conversations are served by
// the survivors, no acknowledged send is lost, every log is gap-free, every
// turn finishes, and every human call's deadline fires once.
func TestKillNodeUnderLoad(t *testing.T) {
	c := startCluster(t, 3, "--model-delay", "200ms", "--human-timeout", "4s")
	st := c.store()
	convs := convIDs("k", 24)
	asks := convIDs("a", 6)
	for i, conv := range asks {
		_, err := c.nodes[i%3].send(conv, "ask: approve?", "ask-"+conv)
		require.NoError(t, err)
	}
	l := startLoad(c, convs, 6)
	require.Eventually(t, func() bool { return l.n.Load() >= 60 }, 60*time.Second, 20*time.Millisecond)

	victim := c.nodes[0]
	survivor := c.nodes[1]
	var moved []string
	for _, conv := range convs {
		if survivor.owner(conv) == victim.addr {
			moved = append(moved, conv)
		}
	}
	require.NotEmpty(t, moved, "the victim owns no conversation")
	l.down(victim)
	killed := time.Now()
	victim.kill()

	// Failover: from the kill to the first send served for each of the
	// victim's conversations, through a survivor.
	lat := make([]time.Duration, len(moved))
	var wg sync.WaitGroup
	for i, conv := range moved {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nd := c.nodes[1+i%2]
			for j := 0; time.Since(killed) < 30*time.Second; j++ {
				if _, err := nd.send(conv, "after the kill", fmt.Sprintf("fo-%s-%d", conv, j)); err == nil {
					l.acked.Store(fmt.Sprintf("fo-%s-%d", conv, j), conv)
					lat[i] = time.Since(killed)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i, d := range lat {
		require.NotZero(t, d, "conversation %s never served after the kill", moved[i])
	}
	t.Logf("failover of %d conversations: p50 %v, p99 %v, max %v", len(lat), percentile(lat, 0.5), percentile(lat, 0.99), percentile(lat, 1))
	require.Less(t, percentile(lat, 0.99), 2*time.Second, "failover p99")
	c.waitMembers(c.nodes[1:]...)
	before := l.n.Load()
	require.Eventually(t, func() bool { return l.n.Load() >= before+30 }, 60*time.Second, 20*time.Millisecond)
	l.finish()

	waitAnswered(t, st, convs)
	l.checkAcked(t, st)
	l.checkFailures(t)
	// Every human call expired exactly once, and its turn went on.
	waitAnswered(t, st, asks)
	for _, conv := range asks {
		results := 0
		for _, ev := range checkLog(t, st, conv) {
			if r := ev.GetToolResult(); r != nil {
				results++
			}
		}
		require.Equal(t, 1, results, "the approve call of %s was resolved %d times", conv, results)
	}
	calls, _, err := st.ListPendingToolCalls(context.Background(), "", 100)
	require.NoError(t, err)
	require.Empty(t, calls, "calls still pending")
}

// TestPausedNodeIsFenced pauses a node (SIGSTOP) until the others drop it,
// moves its conversations with new sends, then resumes it (SIGCONT) and
// sends to them through it while it still believes it owns them: its
// stale activations try to write and are fenced (the member counts the
// activations the Store's ErrConflict retired), no write of theirs lands
// (every log is gap-free, every request id in it once, every send at the
// seq it was acknowledged with), nothing is lost.
func TestPausedNodeIsFenced(t *testing.T) {
	c := startCluster(t, 3, "--model-delay", "100ms")
	st := c.store()
	entry, paused := c.nodes[0], c.nodes[2]
	convs := convIDs("p", 12)
	// Three conversations of the paused member's, kept out of the load,
	// so that no write of theirs is in flight when it is paused: each
	// holds a live, quiescent activation there.
	var held []string
	for i := 0; len(held) < 3; i++ {
		if conv := fmt.Sprintf("h%d", i); entry.owner(conv) == paused.addr {
			held = append(held, conv)
		}
	}
	// acks are the sends of this test's own, by request id: seq and
	// conversation.
	type ack struct {
		conv string
		seq  uint64
	}
	acks := map[string]ack{}
	sendOK := func(nd *node, conv, id string) {
		t.Helper()
		var res sendResult
		var err error
		if !assert.Eventually(t, func() bool {
			res, err = nd.send(conv, "hello", id)
			return err == nil
		}, 30*time.Second, 20*time.Millisecond) {
			require.FailNow(t, fmt.Sprintf("send %s to %s through %s: %v", id, conv, nd.addr, err))
		}
		acks[id] = ack{conv, res.Seq}
	}
	// Each held conversation has a live activation on the paused member
	// (IdleTimeout -1: it never passivates), its turn done.
	for _, conv := range held {
		sendOK(paused, conv, "held-"+conv)
	}
	waitAnswered(t, st, held)
	l := startLoad(c, convs, 4)
	require.Eventually(t, func() bool { return l.n.Load() >= 40 }, 60*time.Second, 20*time.Millisecond)
	fencedBefore := paused.fenced()

	l.down(paused)
	paused.signal(syscall.SIGSTOP)
	c.waitMembers(c.nodes[:2]...)
	// The held conversations move: their new owners append to their logs,
	// past what the paused member's activations hold.
	for _, conv := range held {
		require.NotEqual(t, paused.addr, entry.owner(conv))
		sendOK(entry, conv, "moved-"+conv)
	}
	before := l.n.Load()
	require.Eventually(t, func() bool { return l.n.Load() >= before+40 }, 60*time.Second, 20*time.Millisecond)

	// Resumed, it still believes it owns its conversations (the others
	// have blocked its member id for good: protoactor never readmits it)
	// and serves sends with its stale activations, which the Store fences.
	paused.signal(syscall.SIGCONT)
	for _, conv := range held {
		require.Equal(t, paused.addr, paused.owner(conv), "the resumed member still believes it owns %s", conv)
		sendOK(paused, conv, "back-"+conv)
	}
	fenced := paused.fenced() - fencedBefore
	t.Logf("activations of the resumed member fenced: %d (%d held conversations moved away, and the load's)", fenced, len(held))
	// Each held conversation's stale activation took its send, wrote with
	// the seq it last saw, and was retired by the Store's ErrConflict (the
	// send then went to a new activation, revived from the log).
	require.GreaterOrEqual(t, fenced, int64(len(held)), "stale activations of the resumed member fenced")
	l.up(paused)
	before = l.n.Load()
	require.Eventually(t, func() bool { return l.n.Load() >= before+40 }, 60*time.Second, 20*time.Millisecond)

	// A restart under a new member id rejoins.
	l.down(paused)
	paused.stop()
	paused.start()
	c.waitMembers(c.nodes...)
	l.up(paused)
	before = l.n.Load()
	require.Eventually(t, func() bool { return l.n.Load() >= before+40 }, 60*time.Second, 20*time.Millisecond)
	l.finish()
	waitAnswered(t, st, convs)
	waitAnswered(t, st, held)
	l.checkAcked(t, st)
	l.checkFailures(t)
	// Every send of this test's own is in its log once (checkLog), at the
	// seq it was acknowledged with: no write of a fenced activation landed
	// in its place.
	at := map[string]uint64{}
	for _, conv := range held {
		for _, ev := range checkLog(t, st, conv) {
			if ev.GetUserMsg() != nil {
				at[ev.GetRequestId()] = ev.GetSeq()
			}
		}
	}
	for id, a := range acks {
		require.Equal(t, a.seq, at[id], "send %s to %s", id, a.conv)
	}
}

// TestRollingRestart restarts each node in turn (SIGTERM, then a new
// process on the same ports) under load: nothing acknowledged is lost, and
// every call is answered: acknowledged, or failed with a sentinel of the
// Runtime's contract (a call that reached a member being stopped is
// answered before it closes; one that found its control API closed never
// reached it).
func TestRollingRestart(t *testing.T) {
	c := startCluster(t, 3, "--model-delay", "50ms")
	st := c.store()
	convs := convIDs("r", 12)
	l := startLoad(c, convs, 4)
	for _, nd := range c.nodes {
		before := l.n.Load()
		require.Eventually(t, func() bool { return l.n.Load() >= before+20 }, 60*time.Second, 20*time.Millisecond)
		l.drain(nd)
		nd.stop()
		nd.start()
		c.waitMembers(c.nodes...)
		l.up(nd)
	}
	before := l.n.Load()
	require.Eventually(t, func() bool { return l.n.Load() >= before+20 }, 60*time.Second, 20*time.Millisecond)
	l.finish()
	waitAnswered(t, st, convs)
	l.checkAcked(t, st)
	l.checkFailures(t)
}

// TestSubscribeAcrossOwnerDeath follows a conversation from a node that
// does not own it, kills its owner with SIGKILL, and goes on: the stream
// delivers every event, in seq order, once.
func TestSubscribeAcrossOwnerDeath(t *testing.T) {
	c := startCluster(t, 3, "--model-delay", "50ms")
	st := c.store()
	watcher, owner, sender := c.nodes[0], c.nodes[1], c.nodes[2]
	conv := ""
	for i := 0; conv == ""; i++ {
		if id := fmt.Sprintf("s%d", i); watcher.owner(id) == owner.addr {
			conv = id
		}
	}
	seqs := watcher.stream(t, conv)
	for i := range 5 {
		_, err := sender.send(conv, "hello", fmt.Sprintf("before-%d", i))
		require.NoError(t, err)
	}
	owner.kill()
	killed := time.Now()
	for i := range 5 {
		require.Eventually(t, func() bool {
			_, err := sender.send(conv, "hello", fmt.Sprintf("after-%d", i))
			return err == nil
		}, 30*time.Second, 10*time.Millisecond)
	}
	t.Logf("sends served %v after the kill", time.Since(killed))
	waitAnswered(t, st, []string{conv})
	last, err := st.LastSeq(context.Background(), conv)
	require.NoError(t, err)
	var got []uint64
	require.Eventually(t, func() bool {
		for {
			select {
			case s, ok := <-seqs:
				if !ok {
					return false
				}
				got = append(got, s)
				continue
			default:
			}
			return uint64(len(got)) >= last
		}
	}, 30*time.Second, 10*time.Millisecond, "the stream stopped at %v of %d", got, last)
	t.Logf("stream complete %v after the kill", time.Since(killed))
	for i, s := range got {
		require.Equal(t, uint64(i+1), s, "stream out of order or duplicated: %v", got)
	}
}

// TestCallsThroughAnotherMember runs the Runtime's calls on a member that
// does not own the conversation: SendAndWait to a suspension, Resolve of
// its human call, SendAndWait to an answer, Kill of the owner's activation.
func TestCallsThroughAnotherMember(t *testing.T) {
	c := startCluster(t, 3, "--model-delay", "10ms", "--human-timeout", "1h")
	st := c.store()
	entry, owner := c.nodes[0], c.nodes[1]
	conv := ""
	for i := 0; conv == ""; i++ {
		if id := fmt.Sprintf("x%d", i); entry.owner(id) == owner.addr {
			conv = id
		}
	}
	type end struct {
		Outcome string
		Text    string
		Pending []string
	}
	var e end
	require.NoError(t, entry.post("/sendwait", map[string]string{"conv": conv, "text": "ask: may I?"}, &e))
	require.Equal(t, "suspended", e.Outcome)
	require.Len(t, e.Pending, 1)
	require.NoError(t, entry.post("/resolve", map[string]string{"tool_call_id": e.Pending[0], "result": `"yes"`}, nil))
	err := entry.post("/resolve", map[string]string{"tool_call_id": e.Pending[0], "result": `"again"`}, nil)
	var ce *callError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "stale", ce.Code, "the owner's journal.ErrStale travels back to the member called: %v", err)
	waitAnswered(t, st, []string{conv})
	require.NoError(t, entry.post("/sendwait", map[string]string{"conv": conv, "text": "thanks"}, &e))
	require.Equal(t, "answered", e.Outcome)
	require.Equal(t, "echo: thanks", e.Text)
	var k struct{ Killed bool }
	require.NoError(t, entry.post("/kill?conv="+conv, nil, &k))
	require.True(t, k.Killed, "the owner's activation was live")
	require.NoError(t, entry.post("/kill?conv="+conv, nil, &k))
	require.False(t, k.Killed, "killed twice")
	evs := checkLog(t, st, conv)
	results := 0
	for _, ev := range evs {
		if ev.GetToolResult() != nil {
			results++
		}
	}
	require.Equal(t, 1, results)
}
