package lazarus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/lazarusrt/lazarus/actors"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/lazarusrt/lazarus/supervisor"
)

// localKey marks a context whose call runs on this member whatever the
// membership says: the gateway's calls, so that a request is never
// forwarded twice.
type localKey struct{}

func localCtx(ctx context.Context) context.Context { return context.WithValue(ctx, localKey{}, true) }

// remote reports whether a call with ctx for conversation may go to another
// member: in cluster mode, unless the gateway is running it.
func (r *Runtime) remote(ctx context.Context) bool {
	return r.cl != nil && ctx.Value(localKey{}) == nil
}

// askMoves bounds how many times ask follows a conversation that moved
// under its command.
const askMoves = 4

// ask is sup.Ask, through the conversation's owner in cluster mode. A
// command whose activation here stopped because the conversation moved
// (supervisor.ErrMoved) is sent again to its owner when it is safe to
// (every command but a rewind that was handed over); on the gateway, which
// runs a call where the calling member said, it answers UNAVAILABLE
// instead, which such a caller sends again to the owner its membership
// names. A rewind handed over ends with ErrUnknownOutcome: it may have run.
func (r *Runtime) ask(ctx context.Context, conv string, cmd *actors.Command) (any, error) {
	_, rewind := cmd.Msg.(*messages.AgentRewind)
	for range askMoves {
		res, err := r.askOnce(ctx, conv, cmd)
		if !errors.Is(err, supervisor.ErrMoved) || ctx.Err() != nil ||
			(rewind && errors.Is(err, supervisor.ErrNoAnswer)) { // handed over: it may have run
			return res, err
		}
		if !r.remote(ctx) {
			return nil, movedErr(conv)
		}
	}
	return nil, movedErr(conv)
}

// movedErr is the error of an idempotent call whose conversation moved
// under it: UNAVAILABLE, not run here, to send again to the owner.
func movedErr(conv string) error {
	return &callError{msg: fmt.Sprintf("lazarus: conversation %q moved to another member: %v", clipID(conv), journal.ErrUnavailable),
		errs: []error{journal.ErrUnavailable, errMoved}}
}

// errMoved is wrapped by movedErr: the gateway's refusal to run a call
// whose conversation moved off its member (ClusterReply.answered unset).
var errMoved = errors.New("lazarus: conversation moved")

// askOnce is one attempt of ask.
func (r *Runtime) askOnce(ctx context.Context, conv string, cmd *actors.Command) (any, error) {
	if r.remote(ctx) {
		req := &messages.ClusterRequest{ConversationId: conv, Scope: scopeToProto(cmd.Scope)}
		idempotent, sendReply := true, false
		switch m := cmd.Msg.(type) {
		case *messages.AgentSend:
			req.Op, sendReply = &messages.ClusterRequest_Send{Send: m}, true
		case *messages.AgentWake:
			req.Op = &messages.ClusterRequest_Wake{Wake: m}
		case *messages.AgentConfigure:
			req.Op = &messages.ClusterRequest_Configure{Configure: m}
		case *messages.AgentRewind:
			req.Op, sendReply, idempotent = &messages.ClusterRequest_Rewind{Rewind: m}, true, false
		case *messages.EndConversation:
			req.Op = &messages.ClusterRequest_End{End: m}
		}
		if req.Op != nil {
			reply, err := r.cl.forward(ctx, req, idempotent)
			switch {
			case errors.Is(err, errRunLocal):
			case err != nil:
				return nil, err
			case sendReply:
				return &messages.AgentSendReply{Seq: reply.GetSeq(), Error: reply.GetError()}, nil
			default:
				return &messages.AgentReply{Error: reply.GetError()}, nil
			}
		}
	}
	return r.sup.Ask(ctx, conv, cmd)
}

// forwardOp runs op on the owner of conv in cluster mode; ran is false
// when this member owns it (the caller runs it here).
func (r *Runtime) forwardOp(ctx context.Context, conv string, req *messages.ClusterRequest, idempotent bool) (reply *messages.ClusterReply, ran bool, err error) {
	if !r.remote(ctx) {
		return nil, false, nil
	}
	req.ConversationId = conv
	reply, err = r.cl.forward(ctx, req, idempotent)
	if errors.Is(err, errRunLocal) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, err
	}
	return reply, true, replyErr(reply)
}

// gatewayActor receives the cluster protocol on every member. It never
// blocks: each request runs on a goroutine of its own, which answers the
// request's sender.
type gatewayActor struct{ n *clusterNode }

// Receive implements actor.Actor.
func (g *gatewayActor) Receive(ctx actor.Context) {
	n := g.n
	switch m := ctx.Message().(type) {
	case *messages.ClusterRequest:
		if sender := ctx.Sender(); sender != nil {
			if !n.goServe(func() { n.sys.Root.Send(sender, n.serve(m)) }) {
				n.sys.Root.Send(sender, n.closing(m.GetRequestId()))
			}
		}
	case *messages.ClusterSubscribe:
		if sender := ctx.Sender(); sender != nil {
			// Registered here, not on the stream's goroutine: an
			// unsubscribe, which the gateway takes after the subscribe
			// it follows, always finds the stream (see openServing).
			sctx, ok := n.openServing(sender, m)
			if !ok {
				return
			}
			if !n.goServe(func() { n.serveSubscribe(sctx, sender, m) }) {
				n.closeServing(m.GetSubscriptionId())
				n.sys.Root.Send(sender, n.closing(m.GetRequestId()))
			}
		}
	case *messages.ClusterUnsubscribe:
		n.mu.Lock()
		s, ok := n.serving[m.GetSubscriptionId()]
		n.mu.Unlock()
		if !ok {
			return
		}
		if from := ctx.Sender().GetAddress(); ctx.Sender() == nil || (from != s.addr && from != s.from) {
			// Not from the member the stream is served to, nor the one
			// that asked for it: an id of another member's stream (one
			// whose own subscribe under that id was refused, say) ends
			// nothing.
			n.log.Debug("lazarus: cluster: ignored an unsubscribe not from the stream's member",
				"subscription", clipID(m.GetSubscriptionId()), "from", from, "member", s.addr)
			return
		}
		s.cancel()
	case *messages.ClusterUpdate:
		n.mu.Lock()
		f := n.follow[m.GetSubscriptionId()]
		n.mu.Unlock()
		if f != nil && !f.takes(m, ctx.Sender()) {
			// Not of the stream this follower asked for: another
			// conversation's update, or one from another member than
			// the one it subscribed to (whose gateway sends every update
			// of the stream). Dropped, so that no subscriber is handed
			// another conversation's events; the stream goes on.
			n.log.Debug("lazarus: cluster: dropped an update not of the followed stream",
				"subscription", clipID(m.GetSubscriptionId()), "conversation", clipID(m.GetConversationId()),
				"follows", clipID(f.conv), "from", ctx.Sender().GetAddress(), "owner", f.from)
			return
		}
		if f == nil && !m.GetFinal() && ctx.Sender() != nil {
			// No follower here has this id (ids are never reused: see
			// clusterNode.run): one that ended, or one of an earlier run
			// of this member at this address. Nobody reads the stream:
			// its member (the sender) ends it.
			// Sent as this gateway, at the address the stream is
			// served to: the serving gateway honours no other.
			ctx.Request(ctx.Sender(), &messages.ClusterUnsubscribe{SubscriptionId: m.GetSubscriptionId()})
		}
		if f != nil {
			f.deliver(m)
		}
	}
}

// goServe runs f on a goroutine the member waits for when it stops, and
// reports whether it did: not once the Runtime is closing.
func (n *clusterNode) goServe(f func()) bool {
	n.mu.Lock()
	if n.stopping {
		n.mu.Unlock()
		return false
	}
	n.wg.Add(1)
	n.mu.Unlock()
	go func() {
		defer n.wg.Done()
		f()
	}()
	return true
}

// closing is the answer to a request that arrives once the Runtime is
// closing (its gateway lives until the member has left the cluster):
// UNAVAILABLE, nothing ran, so the caller tries the owner the membership
// names next (a call that is not idempotent returns it), rather than
// waiting for an answer that never comes.
func (n *clusterNode) closing(requestID uint64) *messages.ClusterReply {
	return &messages.ClusterReply{RequestId: requestID, Node: n.self,
		Error: &messages.Error{Code: messages.ErrorCode_ERROR_CODE_UNAVAILABLE, Message: "lazarus: cluster: " + n.self + " is closing"}}
}

// serve runs one request here, for no longer than Options.CallTimeout
// nor the request's timeout (how long its caller waits for the reply).
func (n *clusterNode) serve(m *messages.ClusterRequest) *messages.ClusterReply {
	r := n.r
	timeout := r.opts.CallTimeout
	reply := &messages.ClusterReply{RequestId: m.GetRequestId(), Node: n.self}
	if t := m.GetTimeout(); t != nil {
		if err := t.CheckValid(); err != nil || t.AsDuration() <= 0 {
			reply.Error, reply.Answered = wireErr(journal.Invalidf("lazarus: cluster: request timeout %v is not a positive duration", t.AsDuration())), true
			return reply
		}
		timeout = min(timeout, t.AsDuration())
	}
	ctx, cancel := context.WithTimeout(localCtx(r.life), timeout)
	defer cancel()
	conv, scope := m.GetConversationId(), scopeFromProto(m.GetScope())
	var err error
	switch op := m.GetOp().(type) {
	case *messages.ClusterRequest_Send:
		to := op.Send.GetTo()
		reply.Seq, err = r.SendMessage(ctx, conv, op.Send.GetMessage(), SendOptions{RequestID: op.Send.GetRequestId(), Agent: to.GetAgent(), Broadcast: to.GetBroadcast()}, scope)
	case *messages.ClusterRequest_Wake:
		err = r.wakeAt(ctx, conv, op.Wake.GetExplicit(), op.Wake.GetLogLast())
	case *messages.ClusterRequest_Configure:
		var res any
		var settings map[string]string
		if err = journal.ValidateID("conversation id", conv); err == nil {
			settings, err = r.wireSettings(op.Configure.GetSettings())
		}
		if err != nil {
			err = fmt.Errorf("lazarus: configure %q: %w", clipID(conv), err)
		} else {
			res, err = r.ask(ctx, conv, &actors.Command{Scope: scope, Msg: &messages.AgentConfigure{Settings: settings}})
			if err != nil {
				err = r.callErr(fmt.Sprintf("lazarus: configure %q", clipID(conv)), err)
			} else {
				err = agentReplyErr(res)
			}
		}
	case *messages.ClusterRequest_Rewind:
		var res any
		if err = journal.ValidateID("conversation id", conv); err == nil {
			err = r.checkWireRewind(ctx, conv, op.Rewind, scope)
		}
		if err != nil {
			err = fmt.Errorf("lazarus: rewind %q: %w", clipID(conv), err)
		} else if err = r.checkConversation(ctx, "rewind", conv); err == nil {
			// Checked as Rewind and Edit check it: a rewind of a
			// conversation that does not exist is refused
			// (journal.ErrNotFound), not written as its first event.
			res, err = r.askWireRewind(ctx, conv, op.Rewind, scope)
			if err != nil {
				err = r.callErr(fmt.Sprintf("lazarus: rewind %q", clipID(conv)), err)
			} else {
				reply.Seq, err = sendReplyOf(res)
			}
		}
	case *messages.ClusterRequest_End:
		err = r.End(ctx, conv)
	case *messages.ClusterRequest_ScheduleArm:
		if err = checkWireSchedule(conv, op.ScheduleArm); err == nil {
			r.armSchedule(ctx, op.ScheduleArm)
		}
	case *messages.ClusterRequest_ScheduleDisarm:
		if err = checkWireSchedule(conv, op.ScheduleDisarm); err == nil {
			r.armSchedule(ctx, op.ScheduleDisarm)
		}
	case *messages.ClusterRequest_Resolve:
		res := op.Resolve
		if err = checkWireResolution(res.GetStatus(), res.GetResult()); err != nil {
			err = fmt.Errorf("lazarus: resolve %q: %w", clipID(res.GetToolCallId()), err)
			break
		}
		err = r.resolve(context.WithValue(ctx, authorizedKey{}, true), res.GetToolCallId(), res.GetStatus(), res.GetResult(), scope)
	case *messages.ClusterRequest_Kill:
		reply.Killed = !r.isClosed() && r.killLocal(conv)
	case *messages.ClusterRequest_Delete:
		err = r.Delete(ctx, conv)
	case *messages.ClusterRequest_Reschedule:
		var at time.Time // no deadline
		if ts := op.Reschedule.GetAt(); ts != nil {
			// AsTime would take nanos out of range for another time.
			if err = ts.CheckValid(); err != nil {
				err = fmt.Errorf("lazarus: reschedule %q: %w", clipID(op.Reschedule.GetToolCallId()), journal.Invalidf("deadline: %v", err))
				break
			}
			at = ts.AsTime()
		}
		err = r.Reschedule(ctx, op.Reschedule.GetToolCallId(), at)
	default:
		err = journal.Invalidf("cluster request without an operation")
	}
	reply.Error = wireErr(err)
	// An error is this call's outcome here, but a refusal to run it here
	// (this Runtime closed, the conversation moved): the caller returns
	// the first, and sends the second again where its membership says.
	reply.Answered = err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, errMoved)
	switch m.GetOp().(type) {
	case *messages.ClusterRequest_Rewind, *messages.ClusterRequest_Resolve, *messages.ClusterRequest_Delete, *messages.ClusterRequest_Reschedule:
		// The caller does not send these again on UNAVAILABLE: one that
		// Close ended after it was handed over stays of unknown outcome.
		if errors.Is(err, ErrUnknownOutcome) {
			reply.Error = &messages.Error{Code: messages.ErrorCode_ERROR_CODE_UNKNOWN_OUTCOME, Message: err.Error()}
		}
	}
	return reply
}

// wireSettings is the settings map of a ClusterRequest's configure as
// Configure makes it (agent.Settings.Map: every key, so that they replace
// the row's), or an error wrapping journal.ErrInvalid for one Configure
// would not make (an application actor speaks the gateway's protocol
// too): settings agent.ValidateSettings refuses, a key Settings does not
// have, a value that does not read back as it was sent.
func (r *Runtime) wireSettings(m map[string]string) (map[string]string, error) {
	s := agent.SettingsOf(m)
	if err := agent.ValidateSettings(s, r.tools); err != nil {
		return nil, err
	}
	want := s.Map()
	for k, v := range m {
		if w, ok := want[k]; !ok || w != v {
			return nil, journal.Invalidf("setting %q: not a setting, or a value that does not parse", clipID(k))
		}
	}
	return want, nil
}

// checkWireRewind refuses, with an error wrapping journal.ErrInvalid, a
// rewind or an edit (m.Message set) that Rewind or Edit would not send
// (an application actor speaks the gateway's protocol too): a scope whose
// identity agent.ValidateIdentity refuses, a request id or a reason that
// is not valid, an edit's message that checkUserMessage refuses or that
// does not fit in an event, an edit of a message to an agent no longer in
// Options.Agents (ErrUnknownAgent too).
func (r *Runtime) checkWireRewind(ctx context.Context, conv string, m *messages.AgentRewind, scope agent.Scope) error {
	if err := agent.ValidateIdentity(scope.Identity()); err != nil {
		return fmt.Errorf("scope: %w", err)
	}
	if id := m.GetRequestId(); id != "" {
		if err := journal.ValidateID("request id", id); err != nil {
			return err
		}
	}
	if err := journal.ValidateEvent(&messages.Event{Body: &messages.Event_Rewind{Rewind: &messages.Rewind{ToSeq: m.GetToSeq(), Reason: m.GetReason()}}}); err != nil {
		return fmt.Errorf("reason: %w", err)
	}
	if m == nil {
		return journal.Invalidf("a rewind without its AgentRewind")
	}
	msg := m.GetMessage()
	if msg == nil {
		return nil
	}
	if err := checkUserMessage(msg); err != nil {
		return err
	}
	if err := journal.ValidateEvent(&messages.Event{RequestId: m.GetRequestId(), Body: &messages.Event_UserMsg{UserMsg: msg}}); err != nil {
		return err
	}
	if m.GetEditSeq() == 0 {
		return journal.Invalidf("seq 0 is no message")
	}
	return r.checkEditAgent(ctx, conv, m.GetEditSeq())
}

// askWireRewind asks the conversation to run a ClusterRequest's rewind
// (checked by checkWireRewind), its target checked against the log here
// as Rewind and Edit check it (actors.CheckRewindInLog): the request's
// checked_in_log, edit_agent and edit_audience are not taken on trust
// (with checked_in_log the conversation runs a rewind into its summary
// unchecked). A target the log refuses is an error wrapping
// journal.ErrInvalid, and nothing is written. A rewind without a request
// id is given one, as SendMessage gives a send without one (Rewind and
// Edit always send one): the supervisor sends a rewind whose write was in
// flight when its activation stopped again to a new activation, which
// answers from the log by that id instead of writing it again.
func (r *Runtime) askWireRewind(ctx context.Context, conv string, m *messages.AgentRewind, scope agent.Scope) (any, error) {
	m = proto.CloneOf(m)
	if m.GetRequestId() == "" {
		m.RequestId = newRequestID()
	}
	to, edit := m.GetToSeq(), uint64(0)
	if m.GetMessage() != nil {
		to, edit = m.GetEditSeq()-1, m.GetEditSeq() // checkWireRewind: EditSeq is not 0
	}
	checked, edited, err := actors.CheckRewindInLog(ctx, r.store, conv, to, edit)
	if err != nil {
		return nil, err
	}
	m.CheckedInLog, m.EditAgent, m.EditAudience = checked, edited.GetAgent(), edited.GetAudience()
	return r.ask(ctx, conv, &actors.Command{Scope: scope, Msg: m})
}

// checkWireResolution refuses, with an error wrapping journal.ErrInvalid,
// the answer of a ClusterResolve that Resolve or Reject would not make (an
// application actor speaks the gateway's protocol too): a status other
// than RESOLVED (with a JSON content of at most agent.MaxResultBytes) or
// ERRORED (with an error outcome, whose message is at most
// agent.MaxErrorBytes of UTF-8 and whose code is a valid id).
func checkWireResolution(status messages.ToolCallStatus, out *messages.ToolOutcome) error {
	switch status {
	case messages.ToolCallStatus_TOOL_CALL_STATUS_RESOLVED:
		c, ok := out.GetOutcome().(*messages.ToolOutcome_Content)
		switch {
		case !ok:
			return journal.Invalidf("a resolution without a JSON content")
		case len(c.Content) > agent.MaxResultBytes:
			return journal.Invalidf("result of %d bytes exceeds %d", len(c.Content), agent.MaxResultBytes)
		case !agent.ValidJSON(c.Content):
			return journal.Invalidf("result is not JSON")
		}
	case messages.ToolCallStatus_TOOL_CALL_STATUS_ERRORED:
		e := out.GetError()
		switch {
		case e == nil:
			return journal.Invalidf("a rejection without an error outcome")
		case len(e.GetMessage()) > agent.MaxErrorBytes || !utf8.ValidString(e.GetMessage()):
			return journal.Invalidf("a rejection's message is not at most %d bytes of UTF-8", agent.MaxErrorBytes)
		}
		if err := journal.ValidateID("error code", e.GetCode()); err != nil {
			return err
		}
	default:
		return journal.Invalidf("resolve to status %v (RESOLVED or ERRORED)", status)
	}
	return nil
}

// checkWireSchedule refuses, with an error wrapping journal.ErrInvalid
// and before any timer is touched, the ScheduleArm or ScheduleDisarm of a
// ClusterRequest for conversation conv that the Runtime's own schedule
// calls would not send (an application actor speaks the gateway's
// protocol too): one missing (its ids empty), one naming another
// conversation than the request's or an id (or a non-empty revision)
// journal.ValidateID refuses, an arm without a valid next time.
func checkWireSchedule(conv string, m interface {
	GetConversationId() string
	GetScheduleId() string
	GetRevision() string
}) error {
	if err := journal.ValidateID("conversation id", m.GetConversationId()); err != nil {
		return fmt.Errorf("lazarus: schedule: %w", err)
	}
	if m.GetConversationId() != conv {
		return journal.Invalidf("schedule of conversation %q in a request for %q", clipID(m.GetConversationId()), clipID(conv))
	}
	if err := journal.ValidateID("schedule id", m.GetScheduleId()); err != nil {
		return fmt.Errorf("lazarus: schedule of %q: %w", clipID(conv), err)
	}
	if rev := m.GetRevision(); rev != "" {
		if err := journal.ValidateID("schedule revision", rev); err != nil {
			return fmt.Errorf("lazarus: schedule of %q: %w", clipID(conv), err)
		}
	}
	if a, ok := m.(*messages.ScheduleArm); ok {
		if err := a.GetNext().CheckValid(); err != nil {
			return journal.Invalidf("schedule %q of %q: next time: %v", clipID(a.GetScheduleId()), clipID(conv), err)
		}
	}
	return nil
}

// authorizedKey marks a resolve whose authorization the calling member
// checked.
type authorizedKey struct{}

// serving is a stream this member sends to a subscriber on another member.
// Only a ClusterUnsubscribe sent from addr or from ends it.
type serving struct {
	cancel context.CancelFunc
	addr   string // the subscriber's member (the subscribe's reply address)
	from   string // the address of the subscribe's sender
	member string // its member id, "" until known (see servingMember)
}

// maxSubscriptionIDBytes bounds a ClusterSubscribe's subscription_id (a
// member's ids are its address, its run's random value and a counter).
const maxSubscriptionIDBytes = 1024

// openServing registers the stream a ClusterSubscribe asks for, and
// returns the context that serveSubscribe serves it under, which a
// ClusterUnsubscribe sent from the subscribe's reply address or from its
// sender's address cancels (any other is ignored). The gateway registers
// it as it takes the subscribe, so that an unsubscribe that follows the
// subscribe (a member's messages to another arrive in the order sent: a
// follower whose subscribe timed out unsubscribes after it) finds the
// stream however late the subscribe arrived; registered on the stream's
// goroutine instead, the stream could start after its unsubscribe was
// ignored and hold a slot of the conversation until its first update
// found no follower. A subscription id that is empty, longer than
// maxSubscriptionIDBytes or in use by a stream this gateway serves is
// refused (an error wrapping journal.ErrInvalid), and the stream of that
// id goes on: a second stream under one id could not be told from the
// first (an unsubscribe would end one of them, the other running on until
// its member left).
func (n *clusterNode) openServing(sender *actor.PID, m *messages.ClusterSubscribe) (context.Context, bool) {
	id := m.GetSubscriptionId()
	refuse := func(err error) (context.Context, bool) {
		n.sys.Root.Send(sender, &messages.ClusterReply{RequestId: m.GetRequestId(), Node: n.self,
			Error: journal.ErrorToProto(fmt.Errorf("lazarus: cluster: subscribe to %q: %w", clipID(m.GetConversationId()), err))})
		return nil, false
	}
	switch {
	case id == "":
		return refuse(journal.Invalidf("empty subscription id"))
	case len(id) > maxSubscriptionIDBytes:
		return refuse(journal.Invalidf("subscription id of %d bytes exceeds %d", len(id), maxSubscriptionIDBytes))
	}
	ctx, cancel := context.WithCancel(localCtx(n.r.life))
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.serving[id]; ok {
		cancel()
		return refuse(journal.Invalidf("subscription id %q is in use by a stream this member serves", clipID(id)))
	}
	n.serving[id] = serving{cancel: cancel, addr: m.GetReplyAddress(), from: sender.GetAddress(), member: n.servingMember(m.GetReplyAddress())}
	return ctx, true
}

// closeServing cancels and unregisters the stream id (see openServing).
func (n *clusterNode) closeServing(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s, ok := n.serving[id]; ok {
		s.cancel()
		delete(n.serving, id)
	}
}

// serveSubscribe streams a conversation's updates, under ctx (see
// openServing), to a subscriber on another member until it unsubscribes,
// its member leaves (its address,
// or its member id: it restarted at the same address, see onTopology), or
// this Runtime closes; a member with no follower of the stream's id (it
// restarted at the same address since it subscribed, and this member has
// yet to see its new id) unsubscribes at its first update. A stream that
// ends without a final update of its own ends with one (UNAVAILABLE, not
// answered); either is sent once its subscription here has freed its slot
// of the conversation: the follower that unsubscribed waits for it (see
// unsubscribed), and one that subscribes again after it is not refused
// for that slot.
func (n *clusterNode) serveSubscribe(ctx context.Context, sender *actor.PID, m *messages.ClusterSubscribe) {
	r := n.r
	id := m.GetSubscriptionId()
	defer n.closeServing(id)
	ch, err := r.Subscribe(ctx, m.GetConversationId(), m.GetAfterSeq())
	// An error but this Runtime's closing is the subscription's own (its
	// Store's read failed): answered, the subscriber ends with it.
	n.sys.Root.Send(sender, &messages.ClusterReply{RequestId: m.GetRequestId(), Error: wireErr(err), Node: n.self,
		Answered: err != nil && !errors.Is(err, ErrClosed)})
	if err != nil {
		return
	}
	to := actor.NewPID(m.GetReplyAddress(), GatewayName)
	if m.GetReplyId() != "" {
		to = actor.NewPID(m.GetReplyAddress(), m.GetReplyId())
	}
	// Every update goes with the gateway as its sender: a member that has
	// no follower of this id tells it to end the stream.
	for u := range ch {
		p := updateToProto(id, u)
		if p.GetFinal() {
			// The stream's own end (its lag, a failed read of the
			// Store): sent once its subscription has freed its slot of
			// the conversation, which it does before it closes ch, as
			// the final update of a stream that ends without one is (a
			// follower that subscribes again at once, or its subscriber's
			// next subscription, is not refused for that slot).
			for range ch {
			}
		}
		n.sys.Root.RequestWithCustomSender(to, p, n.gateway)
		if p.GetFinal() {
			return
		}
	}
	// Closed without a final update: this Runtime is closing, or the
	// stream was cancelled. The subscriber resubscribes elsewhere.
	n.sys.Root.RequestWithCustomSender(to, &messages.ClusterUpdate{SubscriptionId: id, ConversationId: m.GetConversationId(), Final: true,
		Error: &messages.Error{Code: messages.ErrorCode_ERROR_CODE_UNAVAILABLE, Message: "lazarus: cluster: the stream's member stopped serving it"}}, n.gateway)
}

// updateToProto is the wire form of an update. An error that is not a
// model call's retry, a turn's end or a lost write race ends the stream:
// it is marked final, and answered unless the subscriber fell behind (a
// follower then subscribes again): the stream's own error (a failed read
// of the Store), which the follower's subscriber ends with, as a local
// subscriber does.
func updateToProto(id string, u Update) *messages.ClusterUpdate {
	p := &messages.ClusterUpdate{SubscriptionId: id, ConversationId: u.ConversationID, Event: u.Event, Delta: u.Delta,
		Error: wireErr(u.Err), Restart: u.Restart, Agent: u.Agent}
	if errors.Is(u.Err, ErrLagged) {
		p.Error = &messages.Error{Code: messages.ErrorCode_ERROR_CODE_UNAVAILABLE, Message: u.Err.Error()}
	}
	if u.Retry != nil {
		p.Retry, p.RetryAttempt, p.RetryDelayMs = true, uint32(u.Retry.Attempt), u.Retry.Delay.Milliseconds()
		// A model call's error: its code says which of the model's
		// sentinels it wraps (wireErr would take its timeout for a write
		// of unknown outcome).
		p.RetryCode, p.Error = actors.TurnFailureCode(u.Err), journal.ErrorToProto(u.Err)
	}
	if u.TurnEnd != nil && u.Event == nil {
		switch u.TurnEnd.Outcome {
		case actors.TurnCancelled:
			p.TurnCancelled = true
		case actors.TurnFailed:
			p.TurnFailedUnwritten = true
		}
	}
	if finalErr(u) {
		p.Final = true
		p.Answered = !errors.Is(u.Err, ErrLagged)
	}
	return p
}

// finalErr reports whether u's error ends its subscription: an error that
// is not a model call's retry, a turn's end or a lost write race.
func finalErr(u Update) bool {
	return u.Err != nil && u.Retry == nil && u.TurnEnd == nil && !errors.Is(u.Err, journal.ErrConflict)
}

// updateFromProto is the update of its wire form.
func updateFromProto(p *messages.ClusterUpdate) Update {
	u := Update{ConversationID: p.GetConversationId(), Event: p.GetEvent(), Delta: p.GetDelta(),
		Err: journal.ErrorFromProto(p.GetError()), Restart: p.GetRestart(), Agent: p.GetAgent()}
	if p.GetRetry() {
		u.Retry = &actors.Retry{Attempt: int(p.GetRetryAttempt()), Delay: time.Duration(p.GetRetryDelayMs()) * time.Millisecond}
		if code := p.GetRetryCode(); code != "" && u.Err != nil {
			// The model's sentinel (TurnError unwraps to it) and the
			// journal's, under the error's own text.
			u.Err = &callError{msg: u.Err.Error(), errs: []error{&actors.TurnError{Message: u.Err.Error(), Code: code}, u.Err}}
		}
	}
	switch {
	case u.Event != nil:
		u.TurnEnd = actors.TurnEndOf(u.Event)
	case p.GetTurnCancelled():
		u.TurnEnd = &actors.TurnEnd{Outcome: actors.TurnCancelled, Err: ErrTurnCancelled}
	case p.GetTurnFailedUnwritten():
		u.TurnEnd = &actors.TurnEnd{Outcome: actors.TurnFailed, Err: u.Err}
	}
	return u
}

// followRetryMin and followRetryMax bound how long a follower waits
// before it subscribes again to an owner it could not reach: the wait
// doubles from the first to the second while the owner stays out of
// reach (see runFollower).
const (
	followRetryMin = 100 * time.Millisecond
	followRetryMax = 2 * time.Second
)

// follower is the receiving end of a stream from another member: the
// stream of conversation conv that member from serves.
type follower struct {
	in       chan *messages.ClusterUpdate
	overflow chan struct{}
	final    chan *messages.ClusterUpdate // the final update, if in was full
	conv     string
	from     string // the address of the member subscribed to
	behind   bool   // an update did not fit in in: see deliver
}

// deliver hands m, an update of f's stream, to the follower; only the
// gateway calls it. An update that does not fit in f.in is dropped and
// f.overflow signalled: the follower ends the stream (what f.in still
// holds is dropped with it) and subscribes again after the last event it
// emitted, so the new stream replays the rest. Every later update of
// the stream is dropped too, though f.in may have room by then: one
// taken after the dropped one would reach the subscriber past a gap (and
// move the follower's last seq past it). A final update that is not
// taken is kept apart (f.final): unsubscribed waits for it.
func (f *follower) deliver(m *messages.ClusterUpdate) {
	if !f.behind {
		select {
		case f.in <- m:
			return
		default:
			f.behind = true
		}
	}
	if m.GetFinal() {
		select {
		case f.final <- m:
		default:
		}
	}
	select {
	case f.overflow <- struct{}{}:
	default:
	}
}

// takes reports whether m, sent by sender, is an update of f's stream: of
// the conversation it follows, from the gateway of the member it
// subscribed to.
func (f *follower) takes(m *messages.ClusterUpdate, sender *actor.PID) bool {
	return m.GetConversationId() == f.conv && sender.GetAddress() == f.from && sender.GetId() == GatewayName
}

// subscribe is Subscribe in cluster mode: it follows the conversation's
// owner, history from the Store after the last seq delivered, then live,
// and moves to the new owner on every membership change (resuming after
// the last seq it delivered, so no event is missed or repeated). The
// caller holds a slot of conv (hub.take): the follower frees it before it
// closes its channel; if subscribe fails, the caller still holds it.
func (n *clusterNode) subscribe(ctx context.Context, conv string, after uint64) (<-chan Update, error) {
	out := make(chan Update, 16)
	n.mu.Lock()
	if n.stopping {
		n.mu.Unlock()
		return nil, ErrClosed
	}
	n.followers.Add(1)
	n.mu.Unlock()
	go func() {
		defer n.followers.Done()
		n.runFollower(ctx, conv, after, out)
	}()
	return out, nil
}

func (n *clusterNode) runFollower(ctx context.Context, conv string, last uint64, out chan<- Update) {
	defer close(out)
	defer n.r.hub.free(conv) // before out is closed: see hub.take
	life := n.r.life
	// streamed says the subscriber has deltas of an answer in progress
	// (handed since the last event, turn end or Restart), and void that
	// a stream started and has handed nothing yet: its deltas of that
	// answer come again from the first (the answer in progress a
	// subscription starts with), or are a new model call's (a new
	// owner's activation), so an update with Restart set goes before its
	// first update.
	streamed, void := false, false
	// emitUntil hands u to the subscriber, and reports whether it did
	// (or u was delivered before); if stop fires first, it gives up
	// (stopped) without it.
	emitUntil := func(u Update, stop <-chan struct{}) (ok, stopped bool) {
		if u.Event != nil && u.Event.GetSeq() <= last {
			return true, false
		}
		if void && streamed {
			select {
			case out <- Update{ConversationID: conv, Restart: true}:
				streamed = false
			case <-stop:
				return false, true
			case <-ctx.Done():
				return false, false
			case <-life.Done():
				return false, false
			}
		}
		void = false
		select {
		case out <- u:
			if u.Event != nil {
				last = u.Event.GetSeq()
			}
			switch {
			case u.Event != nil || u.TurnEnd != nil || u.Restart:
				streamed = false
			case u.Delta != "":
				streamed = true
			}
			return true, false
		case <-stop:
			return false, true
		case <-ctx.Done():
			return false, false
		case <-life.Done():
			return false, false
		}
	}
	emit := func(u Update) bool {
		ok, _ := emitUntil(u, nil)
		return ok
	}
	// wait waits before the follower subscribes again to owner, which it
	// could not reach or which stopped serving its stream (why): the
	// delay doubles from followRetryMin to followRetryMax while the owner
	// stays out of reach, and starts again from followRetryMin once a
	// subscription is served or the membership changes, which ends the
	// wait at once.
	delay := followRetryMin
	wait := func(changed <-chan struct{}, owner, why string, err error) bool {
		n.log.Debug("lazarus: cluster: following the owner failed; subscribing again", "conversation", clipID(conv),
			"owner", owner, "reason", why, "err", err, "retry_in", delay)
		select {
		case <-changed:
			delay = followRetryMin
		case <-n.after(delay):
			delay = min(2*delay, followRetryMax)
		case <-ctx.Done():
			return false
		case <-life.Done():
			return false
		}
		return true
	}
	for ctx.Err() == nil && life.Err() == nil {
		void = true // a new stream starts
		changed := n.changes()
		owner := n.owner(conv)
		ownerIDs := n.idsAt(owner) // its run: see the subscribe's wait below
		if owner == n.self {
			sctx, cancel := context.WithCancel(ctx)
			ch, err := n.r.subscribeLocal(sctx, conv, last, false) // the follower holds the slot
			if err != nil {
				cancel()
				emit(Update{ConversationID: conv, Err: err})
				return
			}
			moved := false
		local:
			for {
				select {
				case u, ok := <-ch:
					if !ok {
						cancel()
						return
					}
					if !emit(u) {
						cancel()
						return
					}
				case <-changed:
					moved = true
					break local
				case <-ctx.Done():
					cancel()
					return
				case <-life.Done():
					// Close waits for this goroutine before it closes
					// the hub, which would end ch.
					cancel()
					return
				}
			}
			cancel()
			// The pump ends on the cancelled context; what it had put in
			// ch is delivered, in order: its events (the next stream
			// starts after them) and the updates that carry none (deltas,
			// a failed write's or a kill's end), which no stream replays.
			// A final error (its lag, say) is the old stream's: the next
			// stream reports its own.
			for u := range ch {
				if finalErr(u) {
					continue
				}
				if !emit(u) {
					return
				}
			}
			if moved {
				continue
			}
		}
		if !n.awaitEnding(ctx, conv, owner) {
			return
		}
		// Unique across the member's runs: an owner may still serve a
		// stream of an earlier run at this address, whose updates must
		// reach no follower of this one.
		id := fmt.Sprintf("%s/%s/%d", n.self, n.run, n.nextID.Add(1))
		f := &follower{in: make(chan *messages.ClusterUpdate, n.r.opts.SubscriberBuffer), overflow: make(chan struct{}, 1),
			final: make(chan *messages.ClusterUpdate, 1), conv: conv, from: owner}
		n.mu.Lock()
		n.follow[id] = f
		n.mu.Unlock()
		unfollow := func(tell bool) {
			n.mu.Lock()
			delete(n.follow, id)
			n.mu.Unlock()
			if tell {
				// As this member's gateway: the owner honours an
				// unsubscribe only from the stream's member.
				n.sys.Root.RequestWithCustomSender(actor.NewPID(owner, GatewayName), &messages.ClusterUnsubscribe{SubscriptionId: id},
					actor.NewPID(n.self, GatewayName))
			}
		}
		answer, release := n.call(actor.NewPID(owner, GatewayName), &messages.ClusterSubscribe{
			RequestId: n.nextID.Add(1), SubscriptionId: id, ConversationId: conv, AfterSeq: last, ReplyAddress: n.self,
		})
		timer := time.NewTimer(n.opts.RequestTimeout)
		var res any
		var err error
	answering:
		select {
		case m := <-answer:
			res, err = actors.AnswerOf(m)
		case <-timer.C:
			// Not answered in time: the owner is told to end a stream it
			// serves (the unsubscribe reaches it after the subscribe,
			// see openServing), and its late answer is awaited apart, as
			// the stream's end if it was served (abandon), for as long
			// again: the follower subscribes to another owner at once,
			// to this one only then (awaitEnding), so that at the
			// owner's Options.MaxSubscriptions the new subscription is
			// not refused for the slot the old one may still hold.
			n.sys.Root.RequestWithCustomSender(actor.NewPID(owner, GatewayName), &messages.ClusterUnsubscribe{SubscriptionId: id},
				actor.NewPID(n.self, GatewayName))
			n.abandon(f, owner, id, conv, answer, release, time.NewTimer(n.opts.RequestTimeout), unfollow)
			if !wait(changed, owner, "the owner did not answer", actor.ErrTimeout) {
				return
			}
			continue
		case <-changed:
			changed = n.changes()
			if n.owner(conv) == owner && slices.Equal(n.idsAt(owner), ownerIDs) {
				// The same owner, of the same run: its answer is
				// awaited still.
				goto answering
			}
			// The membership changed before the owner answered (it may
			// have left, or restarted at its address): the follower
			// subscribes again at once, to the new owner, or to this
			// one once the answer is in (awaitEnding), which is awaited
			// apart, as the stream's end if it was served (abandon).
			n.abandon(f, owner, id, conv, answer, release, timer, unfollow)
			delay = followRetryMin
			continue
		case <-ctx.Done():
			// The subscriber is gone: its channel closes now, and the
			// answer is awaited apart (a stream the owner started
			// meanwhile is ended there).
			n.abandon(f, owner, id, conv, answer, release, timer, unfollow)
			return
		case <-life.Done():
			// Closing: Close waits for this goroutine, not for the
			// answer. A stream the owner started meanwhile is told to
			// end (and ends when this member leaves, as the others do).
			timer.Stop()
			release()
			unfollow(true)
			return
		}
		timer.Stop()
		release()
		// A membership change that came with the answer (select took the
		// answer first) is read as one that came before it: the same
		// owner, of the same run, keeps the stream it answered.
		select {
		case <-changed:
			if n.owner(conv) == owner && slices.Equal(n.idsAt(owner), ownerIDs) {
				changed = n.changes()
			}
		default:
		}
		if err != nil {
			unfollow(true)
			if !wait(changed, owner, "the owner did not answer", err) {
				return
			}
			continue
		}
		if reply, ok := res.(*messages.ClusterReply); ok && reply.GetError() != nil {
			unfollow(false)
			rerr := errorFromWire(reply.GetError())
			// UNAVAILABLE not answered: the owner is closing (or is not
			// the owner any more); answered, the subscription's own
			// failure (the owner's Store read failed), which a local
			// subscription reports too.
			if errors.Is(rerr, journal.ErrUnavailable) && !reply.GetAnswered() {
				if !wait(changed, owner, "the owner refused the subscription", rerr) {
					return
				}
				continue
			}
			emit(Update{ConversationID: conv, Err: rerr})
			return
		}
		delay = followRetryMin // served: the owner is reachable
	remote:
		for {
			select {
			case m := <-f.in:
				if m.GetFinal() {
					unfollow(false)
					// The serving member stopped serving the stream
					// (closing, or this follower fell behind): subscribe
					// again. An answered error is the stream's own (the
					// owner's Store read failed): the subscriber ends with
					// it, as a subscriber on the owner does.
					ferr := journal.ErrorFromProto(m.GetError())
					if ferr == nil || (errors.Is(ferr, journal.ErrUnavailable) && !m.GetAnswered()) {
						if !wait(changed, owner, "the owner stopped serving the stream", ferr) {
							return
						}
						break remote
					}
					emit(updateFromProto(m))
					return
				}
				u := updateFromProto(m)
				ok, behind := emitUntil(u, f.overflow)
				if behind {
					// Fell behind while the subscriber does not read:
					// the stream ends now, not once it reads, so that
					// it holds no slot of the owner's (nor costs the
					// owner a message an update) meanwhile; the
					// follower subscribes again once u is taken.
					n.unsubscribed(f, owner, id)
					unfollow(false)
					if !emit(u) {
						return
					}
					break remote
				}
				if !ok {
					if ctx.Err() != nil && life.Err() == nil {
						n.unsubscribed(f, owner, id)
						unfollow(false)
					} else {
						unfollow(true)
					}
					return
				}
			case <-f.overflow:
				// Fell behind: the stream ends before the follower
				// subscribes again, so that at the owner's
				// Options.MaxSubscriptions the new subscription is not
				// refused for the slot the old one still holds.
				n.unsubscribed(f, owner, id)
				unfollow(false)
				break remote
			case <-changed:
				if n.owner(conv) == owner {
					// The owner stays: its stream ends before the
					// follower subscribes to it again, as when it fell
					// behind, so that at the owner's
					// Options.MaxSubscriptions the new subscription is
					// not refused for the slot the old one still holds.
					n.unsubscribed(f, owner, id)
					unfollow(false)
				} else {
					// The follower moves on at once; its stream ends
					// apart, and a return to this owner (the membership
					// changed back) waits for that (awaitEnding).
					n.endApart(conv, owner, func() {
						n.unsubscribed(f, owner, id)
						unfollow(false)
					}, func() { unfollow(true) })
				}
				break remote
			case <-ctx.Done():
				n.unsubscribed(f, owner, id)
				unfollow(false)
				return
			case <-life.Done():
				unfollow(true)
				return
			}
		}
	}
}

// abandon awaits apart the answer to the subscribe of follower f (stream
// id of conv, asked of owner), whose subscriber left before it came,
// whose membership changed before it came, or that was not answered in
// time: a stream the owner serves is ended
// (unsubscribed), one not answered before timer fires is unsubscribed
// from. release releases the answer's box and unfollow unregisters f. It
// runs under endApart.
func (n *clusterNode) abandon(f *follower, owner, id, conv string, answer <-chan any, release func(), timer *time.Timer,
	unfollow func(tell bool)) {
	n.endApart(conv, owner, func() {
		defer release()
		defer timer.Stop()
		select {
		case m := <-answer:
			res, err := actors.AnswerOf(m)
			if err != nil {
				unfollow(true)
				return
			}
			if reply, ok := res.(*messages.ClusterReply); ok && reply.GetError() != nil {
				unfollow(false) // refused: no stream
				return
			}
			n.unsubscribed(f, owner, id)
			unfollow(false)
		case <-timer.C:
			unfollow(true)
		case <-n.r.life.Done():
			unfollow(true)
		}
	}, func() {
		timer.Stop()
		release()
		unfollow(true)
	})
}

// endingKey names the streams of a conversation that one owner serves to
// this member and that are ending apart (see endApart).
type endingKey struct{ conv, owner string }

// endApart runs end, which ends a stream of conv that owner serves to this
// member, on a goroutine the member waits for when it stops; or, once the
// Runtime is closing, closing instead (the owner's streams to this member
// end when it leaves). Until end returns, a follower of conv on this
// member waits before it subscribes to that owner (awaitEnding), so that
// the two never hold two of the owner's slots of conv; one that
// subscribes to another owner does not wait.
func (n *clusterNode) endApart(conv, owner string, end, closing func()) {
	key, done := endingKey{conv, owner}, make(chan struct{})
	n.mu.Lock()
	n.ending[key] = append(n.ending[key], done)
	n.mu.Unlock()
	finish := func() {
		n.mu.Lock()
		n.ending[key] = slices.DeleteFunc(n.ending[key], func(c chan struct{}) bool { return c == done })
		if len(n.ending[key]) == 0 {
			delete(n.ending, key)
		}
		n.mu.Unlock()
		close(done)
	}
	if !n.goServe(func() {
		defer finish()
		end()
	}) {
		closing()
		finish()
	}
}

// awaitEnding waits until no stream of conv that owner serves to this
// member is still ending apart (see endApart), and reports whether it
// did: not if ctx ended or the Runtime closed first.
func (n *clusterNode) awaitEnding(ctx context.Context, conv, owner string) bool {
	n.mu.Lock()
	pending := slices.Clone(n.ending[endingKey{conv, owner}])
	n.mu.Unlock()
	for _, done := range pending {
		select {
		case <-done:
		case <-ctx.Done():
			return false
		case <-n.r.life.Done():
			return false
		}
	}
	return true
}

// unsubscribeWaitMax bounds how long a follower whose subscriber is gone
// (or fell behind) waits for the owner to end its stream (see unsubscribed), whatever
// ClusterOptions.RequestTimeout: no context bounds that wait.
const unsubscribeWaitMax = DefaultRequestTimeout

// unsubscribed ends the stream id of follower f, which owner serves, for
// a subscriber that is gone (its context ended), that fell behind, or
// whose owner stayed the owner across a membership change (the follower
// subscribes again once it returns), and apart (endApart) for one whose
// subscribe was answered late or whose owner changed: it unsubscribes, then
// waits for the owner's final update of the stream, which the owner sends
// once the stream has ended and freed its slot of the conversation (see
// serveSubscribe), so that a subscription of the conversation the caller
// opens once this one's channel is closed, or the follower's next one,
// finds that slot free. The wait
// is bounded by ClusterOptions.RequestTimeout and unsubscribeWaitMax (an
// owner out of reach, or one whose update cannot reach this member) and
// ends when this Runtime closes; updates that arrive meanwhile are dropped. The
// caller unregisters f afterwards.
func (n *clusterNode) unsubscribed(f *follower, owner, id string) {
	// As this member's gateway: the owner honours an unsubscribe only
	// from the stream's member.
	n.sys.Root.RequestWithCustomSender(actor.NewPID(owner, GatewayName), &messages.ClusterUnsubscribe{SubscriptionId: id},
		actor.NewPID(n.self, GatewayName))
	timer := time.NewTimer(min(n.opts.RequestTimeout, unsubscribeWaitMax))
	defer timer.Stop()
	for {
		select {
		case m := <-f.in:
			if m.GetFinal() {
				return
			}
		case <-f.final: // it did not fit in f.in
			return
		case <-timer.C:
			return
		case <-n.r.life.Done():
			return
		}
	}
}
