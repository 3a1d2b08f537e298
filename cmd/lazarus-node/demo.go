package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pgjournal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
)

// demo runs three members of this binary and a throwaway PostgreSQL,
// spreads conversations over them, kills (SIGKILL) the member that owns the
// most of them in the middle of their turns, and checks that every turn
// finishes on the survivors with gap-free logs; its progress goes to out.
// memberArgs are added to each member's flags. A member that exits before
// the demo kills it fails the demo at once, with what it wrote on stderr.
// The end of ctx (an interrupt) ends the demo at its next step, its
// members killed and its PostgreSQL removed.
func demo(ctx context.Context, out io.Writer, memberArgs ...string) error {
	pg, err := pgtest.Start()
	if err != nil {
		return err
	}
	defer pg.Close()
	if ctx.Err() != nil {
		return errInterrupted
	}
	dsn := pg.DSN("postgres")
	self, err := os.Executable()
	if err != nil {
		return err
	}
	type member struct {
		addr, api string
		cmd       *exec.Cmd
		stderr    syncBuffer
		exited    chan struct{} // closed when cmd has exited
		err       error         // cmd's exit, once exited is closed
	}
	// gone is the error of the first member that exited by itself, nil if
	// none did.
	gone := func(ms []*member) error {
		if ctx.Err() != nil {
			return errInterrupted
		}
		for _, m := range ms {
			select {
			case <-m.exited:
				return fmt.Errorf("member %s exited: %v: %s", m.addr, m.err, strings.TrimSpace(m.stderr.String()))
			default:
			}
		}
		return nil
	}
	var members []*member
	var seeds []string
	free, err := freePorts(9)
	if err != nil {
		return err
	}
	ports := make([][3]int, 3)
	for i := range ports {
		copy(ports[i][:], free[3*i:])
		seeds = append(seeds, fmt.Sprintf("127.0.0.1:%d", ports[i][1]))
	}
	for _, p := range ports {
		m := &member{addr: fmt.Sprintf("127.0.0.1:%d", p[0]), api: fmt.Sprintf("http://127.0.0.1:%d", p[2])}
		m.cmd = exec.Command(self, "--postgres", dsn, "--port", fmt.Sprint(p[0]), "--automanaged-port", fmt.Sprint(p[1]),
			"--seeds", strings.Join(seeds, ","), "--http", fmt.Sprintf("127.0.0.1:%d", p[2]), "--model-delay", "1s")
		m.cmd.Args = append(m.cmd.Args, memberArgs...)
		m.cmd.Stderr = &m.stderr
		m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := m.cmd.Start(); err != nil {
			return err
		}
		m.exited = make(chan struct{})
		go func() { m.err = m.cmd.Wait(); close(m.exited) }()
		defer func() { _ = m.cmd.Process.Kill(); <-m.exited }()
		members = append(members, m)
	}
	fmt.Fprintln(out, "three members on 127.0.0.1, one PostgreSQL; waiting for the membership")
	if err := until(60*time.Second, func() error { return gone(members) }, func() bool {
		for _, m := range members {
			var out struct{ Members []string }
			if getJSON(m.api+"/members", &out) != nil || len(out.Members) != 3 {
				return false
			}
		}
		return true
	}); err != nil {
		var views []string
		for _, m := range members {
			var out struct{ Members []string }
			view := "no answer"
			if getJSON(m.api+"/members", &out) == nil {
				view = strings.Join(out.Members, ",")
			}
			views = append(views, fmt.Sprintf("%s sees [%s], its stderr: %s", m.addr, view, lastLines(m.stderr.String(), 5)))
		}
		return fmt.Errorf("the members never saw each other: %w\n%s", err, strings.Join(views, "\n"))
	}
	convs := []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan"}
	before := map[string]string{}
	count := map[string]int{}
	for _, c := range convs {
		var o struct{ Owner string }
		if err := getJSON(members[0].api+"/owner?conv="+c, &o); err != nil {
			return err
		}
		before[c] = o.Owner
		count[o.Owner]++
	}
	victim := members[0]
	for _, m := range members {
		if count[m.addr] > count[victim.addr] {
			victim = m
		}
	}
	var entry *member // a survivor takes the sends
	for _, m := range members {
		if m != victim {
			entry = m
			break
		}
	}
	if ctx.Err() != nil {
		return errInterrupted
	}
	for _, c := range convs {
		if err := postJSON(entry.api+"/send", map[string]string{"conv": c, "text": "tool: look it up", "request_id": "demo-" + c}); err != nil {
			return fmt.Errorf("send to %s: %w", c, err)
		}
	}
	fmt.Fprintf(out, "%d turns started (each model call takes 1s); kill -9 of %s, owner of %d\n", len(convs), victim.addr, count[victim.addr])
	_ = victim.cmd.Process.Kill()
	<-victim.exited
	var survivors []*member
	for _, m := range members {
		if m != victim {
			survivors = append(survivors, m)
		}
	}
	killed := time.Now()
	st, err := pgjournal.Open(context.Background(), dsn, pgjournal.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	if err := until(60*time.Second, func() error { return gone(survivors) }, func() bool {
		for _, c := range convs {
			evs, err := st.Events(context.Background(), c, journal.EventQuery{Limit: 1})
			if err != nil || len(evs) == 0 || evs[0].GetAssistantMsg() == nil || len(evs[0].GetAssistantMsg().GetToolCalls()) > 0 {
				return false
			}
		}
		return true
	}); err != nil {
		return fmt.Errorf("the turns never finished: %w", err)
	}
	fmt.Fprintf(out, "every turn finished %v after the kill\n\n", time.Since(killed).Round(time.Millisecond))
	fmt.Fprintf(out, "%-8s %-18s %-18s %s\n", "conv", "owner before", "owner after", "log")
	failed := false
	for _, c := range convs {
		var o struct{ Owner string }
		if err := getJSON(entry.api+"/owner?conv="+c, &o); err != nil {
			return err
		}
		evs, err := st.Events(context.Background(), c, journal.EventQuery{})
		if err != nil {
			return err
		}
		verdict := fmt.Sprintf("%d events, gap-free, answered", len(evs))
		for i, ev := range evs {
			if ev.GetSeq() != uint64(i+1) {
				verdict, failed = fmt.Sprintf("GAP at %d", i+1), true
				break
			}
		}
		fmt.Fprintf(out, "%-8s %-18s %-18s %s\n", c, before[c], o.Owner, verdict)
	}
	if failed {
		return errors.New("a log has a gap")
	}
	fmt.Fprintln(out, "\nok: the killed member's conversations finished on the survivors")
	return nil
}

// errInterrupted ends a demo whose context ended.
var errInterrupted = errors.New("interrupted")

// freePorts returns n distinct ports free on 127.0.0.1 a moment ago: each
// is held until all are chosen, so no two of them are the same port.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// lastLines is the last n lines of s, on one line each separated by " | ".
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// until polls ok until it holds, failing after d or as soon as fail
// returns an error.
func until(d time.Duration, fail func() error, ok func() bool) error {
	deadline := time.Now().Add(d)
	for !ok() {
		if err := fail(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", d)
		}
		time.Sleep(50 * time.Millisecond) // polling a child process; not a test
	}
	return nil
}

// syncBuffer is a bytes.Buffer a child process writes while the demo
// reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var client = &http.Client{Timeout: 15 * time.Second}

func getJSON(url string, out any) error {
	res, err := client.Get(url)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	return json.NewDecoder(res.Body).Decode(out)
}

func postJSON(url string, in any) error {
	body, _ := json.Marshal(in)
	res, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer res.Body.Close()
	var out struct{ Error string }
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		return err
	}
	if out.Error != "" {
		return errors.New(out.Error)
	}
	return nil
}
