package crash

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/lazarusrt/lazarus/messages"
)

// The line protocol from the child process to the parent: one line per
// acknowledged write, written only after the acknowledgement. A line a kill
// cuts short is simply never read: the parent checks fewer facts, never a
// wrong one. Lines that do not start with linePrefix (the testing package's
// own output) are ignored.
//
//	ready                           the Runtime is open
//	send <conv> <seq> <request id>  Send returned seq
//	ev <conv> <seq> <hash>          a durable event seen through Subscribe
//	resolve <call id> <status>      Resolve (RESOLVED) or Reject (ERRORED) returned nil
//	err <text>                      the child saw something that must not happen
//	stuck <conv> <text>             settle mode: the conversation never settled
//	settled                         settle mode: every conversation settled
//	holding                         hold mode: the directory is held open
//
// Conversation ids are hex-encoded.
const linePrefix = "LZR "

// reporter writes protocol lines. Each line is one write(2) of far less
// than PIPE_BUF bytes, so a kill cannot interleave or tear two lines.
type reporter struct {
	mu sync.Mutex
	w  io.Writer
}

func (r *reporter) line(format string, args ...any) {
	s := linePrefix + fmt.Sprintf(format, args...)
	s = strings.ReplaceAll(s, "\n", " ") + "\n"
	r.mu.Lock()
	defer r.mu.Unlock()
	_, _ = io.WriteString(r.w, s)
}

// sendAck is one acknowledged Send.
type sendAck struct {
	seq       uint64
	requestID string
}

// ledger accumulates, across cycles, everything the child processes
// reported as acknowledged (or, in the in-process tests, what the Runtime
// acknowledged). It is filled by one goroutine at a time, or through the
// locked ack methods; verifyStore reads it once the writers are done.
type ledger struct {
	mu sync.Mutex // held by the ack methods

	sends    map[string][]sendAck         // conversation -> acknowledged sends
	events   map[string]map[uint64]string // conversation -> seq -> hash
	resolves map[string][]string          // tool call id -> statuses acknowledged
	problems []string                     // err and stuck lines, and contradictions
	ready    bool                         // the last child reported ready
	settled  bool                         // the last child reported settled
	holding  bool                         // the holding child holds the directory

	acks int // facts received, over all cycles
}

func newLedger() *ledger {
	return &ledger{
		sends:    map[string][]sendAck{},
		events:   map[string]map[uint64]string{},
		resolves: map[string][]string{},
	}
}

// absorb records one line of the protocol.
func (l *ledger) absorb(line string, cycle int) {
	rest, ok := strings.CutPrefix(line, linePrefix)
	if !ok {
		return
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return
	}
	bad := func() { l.problems = append(l.problems, fmt.Sprintf("cycle %d: malformed line %q", cycle, line)) }
	switch f[0] {
	case "ready":
		l.ready = true
	case "settled":
		l.settled = true
	case "holding":
		l.holding = true
	case "send":
		if len(f) != 4 {
			bad()
			return
		}
		conv, err1 := unhexID(f[1])
		seq, err2 := strconv.ParseUint(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			bad()
			return
		}
		l.sends[conv] = append(l.sends[conv], sendAck{seq: seq, requestID: f[3]})
		l.acks++
	case "ev":
		if len(f) != 4 {
			bad()
			return
		}
		conv, err1 := unhexID(f[1])
		seq, err2 := strconv.ParseUint(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			bad()
			return
		}
		m := l.events[conv]
		if m == nil {
			m = map[uint64]string{}
			l.events[conv] = m
		}
		if old, ok := m[seq]; ok && old != f[3] {
			l.problems = append(l.problems, fmt.Sprintf("cycle %d: conversation %q: event %d was seen with two contents (%s, then %s): an acknowledged event changed",
				cycle, conv, seq, old, f[3]))
		}
		if _, ok := m[seq]; !ok {
			l.acks++
		}
		m[seq] = f[3]
	case "resolve":
		if len(f) != 3 {
			bad()
			return
		}
		l.resolves[f[1]] = append(l.resolves[f[1]], f[2])
		l.acks++
	case "err":
		l.problems = append(l.problems, fmt.Sprintf("cycle %d: child: %s", cycle, strings.TrimPrefix(rest, "err ")))
	case "stuck":
		l.problems = append(l.problems, fmt.Sprintf("cycle %d: child: never settled: %s", cycle, strings.TrimPrefix(rest, "stuck ")))
	default:
		bad()
	}
}

// ackSend records an acknowledged Send.
func (l *ledger) ackSend(conv string, seq uint64, requestID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sends[conv] = append(l.sends[conv], sendAck{seq: seq, requestID: requestID})
	l.acks++
}

// ackEvent records an event a subscriber saw.
func (l *ledger) ackEvent(conv string, ev *messages.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.events[conv]
	if m == nil {
		m = map[uint64]string{}
		l.events[conv] = m
	}
	h := eventHash(ev)
	if old, ok := m[ev.GetSeq()]; ok && old != h {
		l.problems = append(l.problems, fmt.Sprintf("conversation %q: event %d was seen with two contents", conv, ev.GetSeq()))
	}
	m[ev.GetSeq()] = h
	l.acks++
}

// ackResolve records an answer that Resolve or Reject acknowledged.
func (l *ledger) ackResolve(id string, status messages.ToolCallStatus) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.resolves[id] = append(l.resolves[id], status.String())
	l.acks++
}

// problem records something that must not happen.
func (l *ledger) problem(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.problems = append(l.problems, fmt.Sprintf(format, args...))
}
