// Package leakcheck finds the goroutines a test left behind: those started
// since a baseline and still alive, whose stacks run (or were started by)
// code of this module or of the libraries it starts goroutines in
// (protoactor, Pebble, pgx, net/http). Test-only: nothing outside tests
// imports it.
package leakcheck

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Watched are the stack substrings that make a goroutine count: a
// goroutine whose stack, "created by" line included, holds none of them
// (the Go runtime's, the testing package's) is never taken for a leak.
var Watched = []string{
	"github.com/lazarusrt/lazarus",
	"github.com/asynkron/protoactor-go",
	"github.com/cockroachdb/pebble",
	"github.com/jackc/pgx",
	"github.com/jackc/puddle",
	"net/http.",
}

// Ignored are the stack substrings of goroutines that are not taken for
// leaks although watched: those a library starts that nothing can stop,
// each of which ends by itself soon.
var Ignored = []string{
	// protoactor's dead-letter log throttle: the first dead letter of a
	// period (a message to an actor that stopped, as after a Kill or
	// during a shutdown) starts a goroutine that waits out the actor
	// system's DeadLetterThrottleInterval (1 s by default) on a ticker and
	// cannot be stopped; it holds nothing of the Runtime's.
	"protoactor-go/actor.NewDeadLetter.NewThrottle",
}

// Baseline is the set of goroutines alive when it was taken.
type Baseline map[uint64]bool

// Take returns the goroutines alive now.
func Take() Baseline {
	b := Baseline{}
	for _, g := range dump() {
		b[g.id] = true
	}
	return b
}

type goroutine struct {
	id    uint64
	stack string
}

// dump returns every goroutine with its stack.
func dump() []goroutine {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []goroutine
	for _, s := range strings.Split(string(buf), "\n\n") {
		rest, ok := strings.CutPrefix(s, "goroutine ")
		if !ok {
			continue
		}
		idText, _, _ := strings.Cut(rest, " ")
		id, err := strconv.ParseUint(idText, 10, 64)
		if err != nil {
			continue
		}
		out = append(out, goroutine{id: id, stack: s})
	}
	return out
}

// Stacks returns the stack of every goroutine alive now, each as
// runtime.Stack prints it (its "goroutine N [state]:" line first), the
// caller's included. A test that waits until some goroutine is blocked in
// a given call can look for that call's name in them.
func Stacks() []string {
	var out []string
	for _, g := range dump() {
		out = append(out, g.stack)
	}
	return out
}

// surplus returns the stacks of the watched goroutines alive now that are
// not in b, but the caller's, and those whose stack holds one of ignore.
func (b Baseline) surplus(self uint64, ignore []string) []string {
	var out []string
	for _, g := range dump() {
		if b[g.id] || g.id == self || !holdsAny(g.stack, Watched) || holdsAny(g.stack, Ignored) || holdsAny(g.stack, ignore) {
			continue
		}
		out = append(out, g.stack)
	}
	return out
}

func holdsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// currentID is the id of the calling goroutine.
func currentID() uint64 {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	rest, _ := bytes.CutPrefix(buf, []byte("goroutine "))
	idText, _, _ := bytes.Cut(rest, []byte(" "))
	id, _ := strconv.ParseUint(string(idText), 10, 64)
	return id
}

// Check waits, up to within, until no watched goroutine started since b is
// alive (but the caller's and those whose stack holds one of Ignored or of
// ignore), and
// fails t with their stacks if some still are: goroutines that end a
// little after the call that stopped them returned (a goroutine's last
// instructions after it signalled its end) are given the time to.
func (b Baseline) Check(t testing.TB, within time.Duration, ignore ...string) {
	t.Helper()
	self := currentID()
	deadline := time.Now().Add(within)
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for {
		left := b.surplus(self, ignore)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutine(s) left behind:\n\n%s", len(left), strings.Join(left, "\n\n"))
		}
		<-poll.C
	}
}

// childEnv marks the process a test re-ran itself in.
const childEnv = "LAZARUS_LEAKCHECK_CHILD"

// Isolate re-runs the calling test alone in a new process of the test
// binary, so that no goroutine of another test (left behind, or started
// meanwhile) is counted, and reports its outcome: it returns true in that
// process, where the test goes on, and false in the parent, which is then
// done (failed with the child's output if the child failed).
func Isolate(t *testing.T) bool {
	t.Helper()
	if strings.Contains(t.Name(), "/") {
		t.Fatal("leakcheck.Isolate: call it from a top-level test")
	}
	if os.Getenv(childEnv) == t.Name() {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.count=1", "-test.v", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the test in a process of its own failed: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("--- PASS: "+t.Name())) {
		t.Fatalf("the test in a process of its own did not pass:\n%s", out)
	}
	return false
}
