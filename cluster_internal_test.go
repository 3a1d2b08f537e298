package lazarus

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
	"github.com/lazarusrt/lazarus/messages"
)

func testNode(members ...string) *clusterNode {
	n := &clusterNode{self: members[0]}
	n.members.Store(&members)
	return n
}

// Removing a member moves only its conversations, and the others spread
// over the members left; every member owns a fair share.
func TestOwnerIsARendezvousHash(t *testing.T) {
	three := testNode("127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003")
	two := testNode("127.0.0.1:7001", "127.0.0.1:7002")
	counts := map[string]int{}
	for i := range 3000 {
		id := fmt.Sprintf("conv-%d", i)
		before, after := three.owner(id), two.owner(id)
		counts[before]++
		if before != "127.0.0.1:7003" {
			require.Equal(t, before, after, "%s moved although its owner stayed", id)
		} else {
			require.NotEqual(t, "127.0.0.1:7003", after)
		}
	}
	for m, c := range counts {
		require.InDelta(t, 1000, c, 150, "member %s owns %d of 3000", m, c)
	}
}

// An update survives its wire form: the event, deltas, retries, and the
// ends no event records.
func TestUpdateWireForm(t *testing.T) {
	ev := &messages.Event{Seq: 3, Body: &messages.Event_AssistantMsg{AssistantMsg: &messages.AssistantMessage{}}}
	for _, u := range []Update{
		{ConversationID: "c", Event: ev, TurnEnd: actors.TurnEndOf(ev)},
		{ConversationID: "c", Delta: "he"},
		{ConversationID: "c", Delta: "lo", Agent: "billing"},
		{ConversationID: "c", Err: journal.ErrUnavailable, Retry: &actors.Retry{Attempt: 2, Delay: time.Second}, Restart: true},
		{ConversationID: "c", TurnEnd: &actors.TurnEnd{Outcome: actors.TurnCancelled, Err: ErrTurnCancelled}},
	} {
		p := updateToProto("s", u)
		require.False(t, p.GetFinal())
		got := updateFromProto(p)
		require.Equal(t, u.Event, got.Event)
		require.Equal(t, u.Delta, got.Delta)
		require.Equal(t, u.Agent, got.Agent, "a delta's agent crosses a node (SubscribeWith's view keeps it by its agent)")
		require.Equal(t, u.Retry, got.Retry)
		require.Equal(t, u.Restart, got.Restart)
		require.Equal(t, u.TurnEnd == nil, got.TurnEnd == nil)
		if u.TurnEnd != nil {
			require.Equal(t, u.TurnEnd.Outcome, got.TurnEnd.Outcome)
		}
		require.Equal(t, u.Err == nil, got.Err == nil)
	}
	// A stream's terminal error is final and answered (the subscriber
	// ends with it); a lagged stream says "subscribe again" (UNAVAILABLE,
	// not answered).
	p := updateToProto("s", Update{ConversationID: "c", Err: ErrLagged})
	require.True(t, p.GetFinal())
	require.False(t, p.GetAnswered())
	require.ErrorIs(t, journal.ErrorFromProto(p.GetError()), journal.ErrUnavailable)
	p = updateToProto("s", Update{ConversationID: "c", Err: fmt.Errorf("x: %w", journal.ErrDeleted)})
	require.True(t, p.GetFinal())
	require.True(t, p.GetAnswered())
	require.ErrorIs(t, journal.ErrorFromProto(p.GetError()), journal.ErrDeleted)
	p = updateToProto("s", Update{ConversationID: "c", Err: fmt.Errorf("read: %w", journal.ErrUnavailable)})
	require.True(t, p.GetFinal())
	require.True(t, p.GetAnswered(), "a failed read of the Store is the stream's own error")
	require.ErrorIs(t, journal.ErrorFromProto(p.GetError()), journal.ErrUnavailable)
}

// The error of a retried model call crosses a node with the model's
// sentinel, as a local subscriber gets it (agent.ErrRateLimited,
// context.DeadlineExceeded for a model call that timed out, ...), its
// text and its journal sentinels; a model call's timeout is no write of
// unknown outcome. It crossed as an unclassified error, and a timeout as
// journal.ErrUnknownOutcome.
func TestRetryErrorWireForm(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("model: 429: %w", agent.ErrRateLimited),
		fmt.Errorf("model: %w", context.DeadlineExceeded),
		fmt.Errorf("answer refused: %w", journal.ErrInvalid),
		errors.New("model: something else"),
	} {
		got := updateFromProto(updateToProto("s", Update{ConversationID: "c", Err: err, Retry: &actors.Retry{Attempt: 1, Delay: time.Second}}))
		require.Equal(t, err.Error(), got.Err.Error())
		for _, sentinel := range []error{agent.ErrRateLimited, context.DeadlineExceeded, journal.ErrInvalid} {
			require.Equal(t, errors.Is(err, sentinel), errors.Is(got.Err, sentinel), "%v: %v", err, sentinel)
		}
		require.NotErrorIs(t, got.Err, journal.ErrUnknownOutcome, "%v", err)
		require.NotErrorIs(t, got.Err, journal.ErrUnavailable, "%v", err)
	}
}

// The Runtime's sentinels cross a node as codes the caller maps back.
func TestWireErrors(t *testing.T) {
	require.Nil(t, wireErr(nil))
	require.ErrorIs(t, journal.ErrorFromProto(wireErr(ErrClosed)), journal.ErrUnavailable)
	require.ErrorIs(t, replyErr(&messages.ClusterReply{Error: wireErr(fmt.Errorf("x: %w", ErrUnknownOutcome))}), ErrUnknownOutcome)
	require.ErrorIs(t, replyErr(&messages.ClusterReply{Error: wireErr(journal.ErrStale)}), journal.ErrStale)
	tooMany := replyErr(&messages.ClusterReply{Error: wireErr(fmt.Errorf("x: %w", ErrTooManySubscriptions))})
	require.ErrorIs(t, tooMany, ErrTooManySubscriptions)
	require.Equal(t, "x: "+ErrTooManySubscriptions.Error(), tooMany.Error(), "the owner's message")
	require.True(t, errors.Is(journal.ErrorFromProto(wireErr(journal.ErrDeleted)), journal.ErrDeleted))
}

// TestWireErrorsKeepContextErrors: an owner's call that ended with a
// context's error reaches the caller wrapping it. A timeout is of unknown
// outcome (the code every peer knows, an older one reading it alone), the
// deadline kept with it; a cancellation alone (nothing was written: the
// owner's call says so) keeps its own code.
func TestWireErrorsKeepContextErrors(t *testing.T) {
	for _, owners := range []error{
		fmt.Errorf("lazarus: send to %q: revive: %w", "c", context.DeadlineExceeded),
		fmt.Errorf("lazarus: send to %q: %w: %w", "c", ErrUnknownOutcome, context.DeadlineExceeded),
		fmt.Errorf("lazarus: send to %q: %w: %w", "c", ErrUnknownOutcome, context.Canceled),
	} {
		e := wireErr(owners)
		require.Equal(t, messages.ErrorCode_ERROR_CODE_UNKNOWN_OUTCOME, e.GetCode(), "%v", owners)
		got := replyErr(&messages.ClusterReply{Error: e})
		require.ErrorIs(t, got, ErrUnknownOutcome, "%v", owners)
		for _, c := range []error{context.DeadlineExceeded, context.Canceled} {
			require.Equal(t, errors.Is(owners, c), errors.Is(got, c), "%v: %v", owners, c)
		}
	}
	owners := fmt.Errorf("lazarus: send to %q: revive: %w", "c", context.Canceled)
	got := replyErr(&messages.ClusterReply{Error: wireErr(owners)})
	require.ErrorIs(t, got, context.Canceled)
	require.NotErrorIs(t, got, ErrUnknownOutcome)
	require.NotErrorIs(t, got, journal.ErrUnknownOutcome)
}

// countDeadlines counts the reads of every deadline (the expiry actor's
// rebuilds).
type countDeadlines struct {
	journal.Store
	reads atomic.Int32
}

func (s *countDeadlines) Deadlines(ctx context.Context, dueBy time.Time, fn func(*messages.Deadline) error) error {
	if dueBy.IsZero() {
		s.reads.Add(1)
	}
	return s.Store.Deadlines(ctx, dueBy, fn)
}

// A membership applied while Open starts the supervisor (after the
// cluster member started, before the node knows the supervisor) found no
// supervisor to tell, and the expiry actor may have read its deadlines
// with the membership before: attaching the supervisor repartitions then,
// so the deadlines of the conversations this member gained are armed.
func TestMembershipChangeBeforeTheSupervisorRepartitions(t *testing.T) {
	store := &countDeadlines{Store: memjournal.New(memjournal.Options{})}
	rt, err := Open(Options{Store: store, NoResume: true, Model: agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
		return agent.Text("ok"), nil
	})})
	require.NoError(t, err)
	defer rt.Close()
	require.Eventually(t, func() bool { return store.reads.Load() == 1 }, 10*time.Second, time.Millisecond, "the expiry actor read the deadlines")
	n := newNode(rt, rt.system)
	gen := n.generation()
	n.onTopology([]*cluster.Member{{Id: "other", Host: "10.0.0.1", Port: 7001, Kinds: []string{ConversationKind}}})
	require.Equal(t, []string{"10.0.0.1:7001", n.self}, *n.members.Load())
	n.attach(rt.sup, gen)
	require.Eventually(t, func() bool { return store.reads.Load() == 2 }, 10*time.Second, time.Millisecond, "no rebuild after the change")
}

// countActive counts the listings of the index of ACTIVE conversations.
type countActive struct {
	journal.Store
	lists atomic.Int32
}

func (s *countActive) ListActiveConversations(ctx context.Context, cursor string, limit int) ([]string, string, error) {
	s.lists.Add(1)
	return s.Store.ListActiveConversations(ctx, cursor, limit)
}

// With Options.NoResume, a membership change runs no resume scan either:
// it ran one whatever the option.
func TestNoResumeHoldsOnMembershipChange(t *testing.T) {
	for _, noResume := range []bool{true, false} {
		store := &countActive{Store: memjournal.New(memjournal.Options{})}
		rt, err := Open(Options{Store: store, NoResume: noResume, ResumeInterval: -1, Model: agent.ModelFunc(func(context.Context, agent.Turn, func(string)) (*messages.AssistantMessage, error) {
			return agent.Text("ok"), nil
		})})
		require.NoError(t, err)
		n := newNode(rt, rt.system)
		n.attach(rt.sup, n.generation())
		before := store.lists.Load()
		if !noResume {
			require.Eventually(t, func() bool { return store.lists.Load() == 1 }, 10*time.Second, time.Millisecond, "Open's scan")
			before = 1
		}
		n.onTopology([]*cluster.Member{{Id: "other", Host: "10.0.0.1", Port: 7001, Kinds: []string{ConversationKind}}})
		require.Eventually(t, func() bool {
			n.mu.Lock()
			defer n.mu.Unlock()
			return !n.resuming
		}, 10*time.Second, time.Millisecond)
		if noResume {
			require.Equal(t, before, store.lists.Load(), "no scan with NoResume")
		} else {
			require.Equal(t, before+1, store.lists.Load(), "a scan for the conversations this member gained")
		}
		require.NoError(t, rt.Close())
	}
}
