package actors

import "github.com/asynkron/protoactor-go/actor"

// ReplyBox receives the answer to one request: a protoactor process of its
// own, registered under a name of the caller's choosing, used as the
// request's sender in place of a Future. Unlike a Future, a caller can stop
// waiting for it at any time (its context ended, its supervisor stopped),
// and its name can be made unique across runs of a process (a Future's
// name is a counter of the actor system, which starts again in each run, so
// a late answer to a call of an earlier run could reach a new Future of
// that name).
type ReplyBox struct {
	reg *actor.ProcessRegistryValue
	pid *actor.PID
	ch  chan any
}

// NewReplyBox registers a box on system, named prefix followed by the
// system's next id (unique in the system: the name is free), and returns
// it. The caller must Release it.
func NewReplyBox(system *actor.ActorSystem, prefix string) *ReplyBox {
	p := &replyProcess{ch: make(chan any, 1)}
	reg := system.ProcessRegistry
	pid, _ := reg.Add(p, prefix+reg.NextId())
	return &ReplyBox{reg: reg, pid: pid, ch: p.ch}
}

// PID is the box's address: the sender to give the request.
func (b *ReplyBox) PID() *actor.PID { return b.pid }

// Answer delivers the first answer the box got (a later one is dropped),
// unwrapped from its envelope: a *actor.DeadLetterResponse when the
// request's target was gone (see AnswerOf).
func (b *ReplyBox) Answer() <-chan any { return b.ch }

// Release unregisters the box: an answer sent later is a dead letter.
func (b *ReplyBox) Release() { b.reg.Remove(b.pid) }

// AnswerOf is the answer m a ReplyBox got, or actor.ErrDeadLetter for the
// dead-letter response of a target that was gone.
func AnswerOf(m any) (any, error) {
	if _, ok := m.(*actor.DeadLetterResponse); ok {
		return nil, actor.ErrDeadLetter
	}
	return m, nil
}

// replyProcess is the process behind a ReplyBox.
type replyProcess struct{ ch chan any }

// SendUserMessage keeps the first answer; a later one, or one arriving
// after the caller left, is dropped.
func (p *replyProcess) SendUserMessage(_ *actor.PID, msg any) {
	_, m, _ := actor.UnwrapEnvelope(msg)
	select {
	case p.ch <- m:
	default:
	}
}

// SendSystemMessage ignores system messages: nothing watches the box.
func (p *replyProcess) SendSystemMessage(*actor.PID, any) {}

// Stop does nothing: the caller unregisters the box (Release).
func (p *replyProcess) Stop(*actor.PID) {}
