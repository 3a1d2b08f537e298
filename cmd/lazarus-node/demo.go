package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pgjournal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
)

// demo runs three members of this binary and a throwaway PostgreSQL,
// spreads conversations over them, kills (SIGKILL) the member that owns the
// most of them in the middle of their turns, and checks that every turn
// finishes on the survivors with gap-free logs.
func demo() error {
	pg, err := pgtest.Start()
	if err != nil {
		return err
	}
	defer pg.Close()
	dsn := pg.DSN("postgres")
	self, err := os.Executable()
	if err != nil {
		return err
	}
	type member struct {
		addr, api string
		cmd       *exec.Cmd
	}
	var members []*member
	var seeds []string
	ports := make([][3]int, 3)
	for i := range ports {
		for j := range ports[i] {
			if ports[i][j], err = freePort(); err != nil {
				return err
			}
		}
		seeds = append(seeds, fmt.Sprintf("127.0.0.1:%d", ports[i][1]))
	}
	for _, p := range ports {
		m := &member{addr: fmt.Sprintf("127.0.0.1:%d", p[0]), api: fmt.Sprintf("http://127.0.0.1:%d", p[2])}
		m.cmd = exec.Command(self, "--postgres", dsn, "--port", fmt.Sprint(p[0]), "--automanaged-port", fmt.Sprint(p[1]),
			"--seeds", strings.Join(seeds, ","), "--http", fmt.Sprintf("127.0.0.1:%d", p[2]), "--model-delay", "1s")
		m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := m.cmd.Start(); err != nil {
			return err
		}
		defer func() { _ = m.cmd.Process.Kill(); _ = m.cmd.Wait() }()
		members = append(members, m)
	}
	fmt.Println("three members on 127.0.0.1, one PostgreSQL; waiting for the membership")
	if err := until(60*time.Second, func() bool {
		for _, m := range members {
			var out struct{ Members []string }
			if getJSON(m.api+"/members", &out) != nil || len(out.Members) != 3 {
				return false
			}
		}
		return true
	}); err != nil {
		return fmt.Errorf("the members never saw each other: %w", err)
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
	for _, c := range convs {
		if err := postJSON(entry.api+"/send", map[string]string{"conv": c, "text": "tool: look it up", "request_id": "demo-" + c}); err != nil {
			return fmt.Errorf("send to %s: %w", c, err)
		}
	}
	fmt.Printf("9 turns started (each model call takes 1s); kill -9 of %s, owner of %d\n", victim.addr, count[victim.addr])
	_ = victim.cmd.Process.Kill()
	killed := time.Now()
	st, err := pgjournal.Open(context.Background(), dsn, pgjournal.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	if err := until(60*time.Second, func() bool {
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
	fmt.Printf("every turn finished %v after the kill\n\n", time.Since(killed).Round(time.Millisecond))
	fmt.Printf("%-8s %-18s %-18s %s\n", "conv", "owner before", "owner after", "log")
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
		fmt.Printf("%-8s %-18s %-18s %s\n", c, before[c], o.Owner, verdict)
	}
	if failed {
		return errors.New("a log has a gap")
	}
	fmt.Println("\nok: the killed member's conversations finished on the survivors")
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func until(d time.Duration, ok func() bool) error {
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", d)
		}
		time.Sleep(50 * time.Millisecond) // polling a child process; not a test
	}
	return nil
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
