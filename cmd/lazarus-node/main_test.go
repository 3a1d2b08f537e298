package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
)

// asMain, set in the environment, makes the test binary run main: the
// demo's members are the binary that runs the demo.
const asMain = "LAZARUS_NODE_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMain) != "" {
		main()
		os.Exit(exitOK)
	}
	pgtest.Main(m)
}

// TestDemoMemberExits: a member of the demo that exits by itself (here a
// flag it does not know) fails the demo at once with what the member
// wrote, not after the minute the membership is given.
func TestDemoMemberExits(t *testing.T) {
	t.Setenv(asMain, "1")
	start := time.Now()
	var out bytes.Buffer
	err := demo(context.Background(), &out, "--nope")
	require.ErrorContains(t, err, "flag provided but not defined: -nope")
	require.ErrorContains(t, err, "exit status 2")
	require.Less(t, time.Since(start), 50*time.Second, "not the membership's minute")
	require.Contains(t, out.String(), "waiting for the membership")
}

// TestUsageErrors: a bad command line is refused with exit status 2 and a
// message naming the problem on stderr, before anything is opened; --help
// is status 0.
func TestUsageErrors(t *testing.T) {
	ok := []string{"--postgres", "postgres://x", "--automanaged-port", "7101", "--seeds", "127.0.0.1:7101"}
	with := func(extra ...string) []string { return append(append([]string(nil), ok...), extra...) }
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", with("--nope"), "flag provided but not defined: -nope"},
		{"bad duration", with("--model-delay", "soon"), "invalid value"},
		{"no postgres", ok[2:], "--postgres is required"},
		{"no automanaged port", append(append([]string(nil), ok[:2]...), ok[4:]...), "--automanaged-port is required"},
		{"no seeds", ok[:4], "--seeds is required"},
		{"empty seeds", with("--seeds", " , "), "--seeds is required"},
		{"port out of range", with("--port", "70000"), "--port must be from 0 to 65535"},
		{"negative model delay", with("--model-delay", "-1s"), "--model-delay must not be negative"},
		{"zero human timeout", with("--human-timeout", "0s"), "--human-timeout must be positive"},
		{"argument", with("serve"), `unexpected arguments ["serve"]`},
		{"seed without a port", with("--seeds", "127.0.0.1:7101,127.0.0.1"), `--seeds: "127.0.0.1": `},
		{"seed port zero", with("--seeds", "127.0.0.1:0"), `--seeds: "127.0.0.1:0": port "0" is not from 1 to 65535`},
		{"seed port out of range", with("--seeds", "127.0.0.1:70000"), `--seeds: "127.0.0.1:70000": port`},
		{"seed without a host", with("--seeds", ":7101"), `--seeds: ":7101": no host`},
		{"seed with a path", with("--seeds", "127.0.0.1:7101/x"), `--seeds: "127.0.0.1:7101/x": port`},
		{"http without a port", with("--http", "nonsense"), `--http: "nonsense": `},
		{"http port out of range", with("--http", "127.0.0.1:99999"), `--http: "127.0.0.1:99999": port "99999" is not from 0 to 65535`},
		{"malformed dsn", with("--postgres", "::bad::"), "--postgres: not a PostgreSQL connection string"},
		{"malformed dsn url", with("--postgres", "postgres://u:s3cret@127.0.0.1:notaport/db"), "--postgres: not a PostgreSQL connection string"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(c.args, &stdout, &stderr, nil, nil)
			require.Equal(t, exitUsage, code, "stderr: %s", stderr.String())
			require.Contains(t, stderr.String(), c.want)
			require.Contains(t, stderr.String(), "Usage of lazarus-node", "the usage follows the error")
			require.NotContains(t, stderr.String(), "s3cret", "a DSN's password is masked")
			require.Empty(t, stdout.String())
		})
	}
	var stdout, stderr bytes.Buffer
	require.Equal(t, exitOK, run([]string{"--help"}, &stdout, &stderr, nil, nil))
	for _, f := range []string{"-postgres", "-port", "-automanaged-port", "-seeds", "-http", "-model-delay", "-human-timeout", "-verbose"} {
		require.Contains(t, stderr.String(), f, "--help lists the flags of the package doc")
	}
	require.Contains(t, stderr.String(), `(default "127.0.0.1:0")`)
	require.Contains(t, stderr.String(), "(default 50ms)")
	require.Contains(t, stderr.String(), "(default 3s)")
}

// TestControlAddressTaken: a control API address that cannot be had fails
// the start with status 1 and says so, and the member never claims to be
// ready.
func TestControlAddressTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	var stdout, stderr bytes.Buffer
	code := run([]string{"--postgres", "postgres://127.0.0.1:1/none", "--automanaged-port", "7101",
		"--seeds", "127.0.0.1:7101", "--http", l.Addr().String()}, &stdout, &stderr, nil, nil)
	require.Equal(t, exitError, code)
	require.Contains(t, stderr.String(), "lazarus-node: control API: listen tcp "+l.Addr().String())
	require.NotContains(t, stdout.String(), "ready")
}

// testAPI serves the control API over a Runtime on the memory store (no
// cluster), its Options changed by tweaks; endStreams is the shutdown's
// end of the streams. When t ends the streams are ended, the server
// closed, and the Runtime closed (a test may close it sooner).
func testAPI(t *testing.T, tweaks ...func(*lazarus.Options)) (rt *lazarus.Runtime, base string, endStreams func()) {
	t.Helper()
	opts := lazarus.Options{Model: echoModel(0), Tools: tools(time.Hour), IdleTimeout: -1}
	for _, tweak := range tweaks {
		tweak(&opts)
	}
	rt, err := lazarus.Open(opts)
	require.NoError(t, err)
	var fenced atomic.Int64
	streams, end := context.WithCancel(context.Background())
	srv := httptest.NewServer(api(rt, &fenced, streams))
	t.Cleanup(func() {
		end()
		srv.Close()
		require.NoError(t, rt.Close())
	})
	return rt, srv.URL, end
}

// testClient bounds a call: one that streams instead of answering fails
// the test rather than hanging it.
var testClient = &http.Client{Timeout: 10 * time.Second}

// call makes one control call and returns its status and decoded body.
func call(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	res, err := testClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
	return res.StatusCode, out
}

// TestControlAPIRefusesBadInput: a bad body, a missing conv and an after
// that is not a seq are 400 with code invalid, never a 409 nor a stream
// from seq 0.
func TestControlAPIRefusesBadInput(t *testing.T) {
	_, base, _ := testAPI(t)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/send", "{"},
		{"POST", "/sendwait", "not json"},
		{"POST", "/resolve", ""},
		{"POST", "/send", `{"conv":"","text":"hi"}`},
		{"POST", "/kill", ""},
		{"GET", "/owner", ""},
		{"GET", "/stream", ""},
		{"GET", "/stream?conv=c&after=two", ""},
	} {
		status, out := call(t, c.method, base+c.path, c.body)
		require.Equal(t, http.StatusBadRequest, status, "%s %s %q: %v", c.method, c.path, c.body, out)
		require.Equal(t, "invalid", out["code"], "%s %s", c.method, c.path)
		require.NotEmpty(t, out["error"])
	}
}

// TestControlAPIWrongMethodOrPath: a method a path does not take is 405
// method_not_allowed with an Allow header, and a path the API does not
// have 404 not_found, in the API's JSON ({"error","code"}), as the
// package documents, not the mux's plain text; /healthz still answers ok.
func TestControlAPIWrongMethodOrPath(t *testing.T) {
	_, base, _ := testAPI(t)
	for _, c := range []struct{ method, path, allow string }{
		{"POST", "/healthz", "GET, HEAD"},
		{"DELETE", "/healthz", "GET, HEAD"},
		{"POST", "/stats", "GET, HEAD"},
		{"POST", "/members", "GET, HEAD"},
		{"PUT", "/owner?conv=c", "GET, HEAD"},
		{"POST", "/stream?conv=c", "GET, HEAD"},
		{"GET", "/send", "POST"},
		{"GET", "/sendwait", "POST"},
		{"DELETE", "/kill?conv=c", "POST"},
		{"GET", "/resolve", "POST"},
	} {
		req, err := http.NewRequest(c.method, base+c.path, nil)
		require.NoError(t, err)
		res, err := testClient.Do(req)
		require.NoError(t, err)
		var out map[string]any
		err = json.NewDecoder(res.Body).Decode(&out)
		res.Body.Close()
		require.NoError(t, err, "%s %s", c.method, c.path)
		require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode, "%s %s: %v", c.method, c.path, out)
		require.Equal(t, c.allow, res.Header.Get("Allow"), "%s %s", c.method, c.path)
		require.Equal(t, "application/json", res.Header.Get("Content-Type"), "%s %s", c.method, c.path)
		require.Equal(t, "method_not_allowed", out["code"], "%s %s", c.method, c.path)
		require.Contains(t, out["error"], "takes "+c.allow+", not "+c.method)
	}
	for _, method := range []string{"GET", "POST"} {
		status, out := call(t, method, base+"/nope", "")
		require.Equal(t, http.StatusNotFound, status, "%s /nope: %v", method, out)
		require.Equal(t, "not_found", out["code"], "%s /nope", method)
	}
	res, err := testClient.Get(base + "/healthz")
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "ok", string(body))
}

// TestControlAPIRefusesUnknownFields: a body with a field the call does
// not know, data after its object, or no object at all is refused 400
// invalid, as package server refuses it, with a message naming what is
// wrong, and nothing is sent or resolved.
func TestControlAPIRefusesUnknownFields(t *testing.T) {
	_, base, _ := testAPI(t)
	for _, c := range []struct{ path, body, want string }{
		{"/send", `{"conv":"u","text":"hi","admin":true}`, `unknown field "admin"`},
		{"/send", `{"conv":"u","text":"hi"} {"conv":"u","text":"again"}`, "data after the JSON object"},
		{"/send", `{"conv":"u","text":"hi"} x`, "data after the JSON object"},
		{"/send", `null`, "not a JSON object"},
		{"/send", "{\"conv\":\"u\",\"text\":\"\xff\"}", "not valid UTF-8"},
		{"/sendwait", `{"conv":"u","text":"hi","request_id":"r"}`, `unknown field "request_id"`},
		{"/sendwait", `{"conv":"u","text":"hi"}{}`, "data after the JSON object"},
		{"/sendwait", `["u","hi"]`, "not a JSON object"},
		{"/resolve", `{"tool_call_id":"t","result":"1","by":"olga"}`, `unknown field "by"`},
		{"/resolve", `{"tool_call_id":"t","result":"1"} 2`, "data after the JSON object"},
	} {
		status, out := call(t, "POST", base+c.path, c.body)
		require.Equal(t, http.StatusBadRequest, status, "%s %q: %v", c.path, c.body, out)
		require.Equal(t, "invalid", out["code"], "%s %q", c.path, c.body)
		require.Contains(t, out["error"], c.want, "%s %q", c.path, c.body)
	}
	// Nothing was sent to u: its first message is seq 1.
	status, out := call(t, "POST", base+"/send", `{"conv":"u","text":"first"}`)
	require.Equal(t, http.StatusOK, status, "%v", out)
	require.EqualValues(t, 1, out["seq"])
}

// TestControlAPICalls: each endpoint answers as the package doc says.
func TestControlAPICalls(t *testing.T) {
	_, base, endStreams := testAPI(t)
	status, out := call(t, "POST", base+"/sendwait", `{"conv":"c","text":"hi"}`)
	require.Equal(t, http.StatusOK, status, "%v", out)
	require.Equal(t, "answered", out["outcome"])
	require.Equal(t, "echo: hi", out["text"])

	status, out = call(t, "POST", base+"/send", `{"conv":"c","text":"again","request_id":"r1"}`)
	require.Equal(t, http.StatusOK, status, "%v", out)
	require.EqualValues(t, 3, out["seq"], "after the user message and the answer")

	status, out = call(t, "POST", base+"/sendwait", `{"conv":"h","text":"ask: may I?"}`)
	require.Equal(t, http.StatusOK, status, "%v", out)
	require.Equal(t, "suspended", out["outcome"])
	pending := out["pending"].([]any)
	require.Len(t, pending, 1)
	body := fmt.Sprintf(`{"tool_call_id":%q,"result":"\"yes\""}`, pending[0])
	status, out = call(t, "POST", base+"/resolve", body)
	require.Equal(t, http.StatusOK, status, "%v", out)
	require.Empty(t, out)
	status, out = call(t, "POST", base+"/resolve", body)
	require.Equal(t, http.StatusConflict, status, "%v", out)
	require.Equal(t, "stale", out["code"])

	// A conversation whose turn has ended and that has nothing on its way
	// (h's answer may still be delivered to a successor of a killed
	// activation, which a second kill would find live).
	status, out = call(t, "POST", base+"/sendwait", `{"conv":"k","text":"hi"}`)
	require.Equal(t, http.StatusOK, status, "%v", out)
	require.Equal(t, "answered", out["outcome"])
	status, out = call(t, "POST", base+"/kill?conv=k", "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, true, out["killed"], "the activation was live (no idle timeout)")
	_, out = call(t, "POST", base+"/kill?conv=k", "")
	require.Equal(t, false, out["killed"], "killed twice")
	status, out = call(t, "GET", base+"/owner?conv=h", "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "", out["owner"], "no cluster: no owner")
	status, out = call(t, "GET", base+"/stats", "")
	require.Equal(t, http.StatusOK, status)
	require.EqualValues(t, 0, out["fenced"])

	res, err := http.Get(base + "/healthz")
	require.NoError(t, err)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, "ok", string(b))

	// /stream from after=1: seq 2 onwards, one JSON line each, until the
	// shutdown ends it.
	res, err = http.Get(base + "/stream?conv=c&after=1")
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "application/x-ndjson", res.Header.Get("Content-Type"))
	dec := json.NewDecoder(res.Body)
	for _, want := range []uint64{2, 3} {
		var line struct {
			Seq  uint64
			Kind string
		}
		require.NoError(t, dec.Decode(&line))
		require.Equal(t, want, line.Seq)
		require.NotEmpty(t, line.Kind)
	}
	endStreams()
	_, err = io.ReadAll(res.Body)
	require.NoError(t, err, "the shutdown ends the stream cleanly")
}

// TestStopsGracefully: a member on PostgreSQL prints its ready line with
// the control API's address; on SIGTERM a call in flight is answered,
// the member says it stops and has stopped, refuses new connections and
// exits 0, with no error line on stderr.
func TestStopsGracefully(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	am := freeTestPort(t)
	stdoutR, stdoutW := io.Pipe()
	var stderr bytes.Buffer
	stop := make(chan os.Signal, 1)
	done := make(chan int, 1)
	go func() {
		defer stdoutW.Close()
		done <- run([]string{"--postgres", dsn, "--automanaged-port", fmt.Sprint(am), "--seeds", fmt.Sprintf("127.0.0.1:%d", am),
			"--model-delay", "500ms"}, stdoutW, &stderr, stop, func(code int) { t.Errorf("forced out with status %d", code) })
	}()
	lines := make(chan string, 8)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdoutR)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var ready string
	select {
	case ready = <-lines:
	case code := <-done:
		t.Fatalf("exited %d before it was ready: %s", code, stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatal("never ready")
	}
	_, apiURL, found := strings.Cut(ready, " ready, control API ")
	require.True(t, found, "ready line: %q", ready)
	require.Regexp(t, `^lazarus-node 127\.0\.0\.1:\d+ ready, control API http://127\.0\.0\.1:\d+$`, ready)

	// A stream shows when the turn has begun: its user message is written.
	res, err := http.Get(apiURL + "/stream?conv=c")
	require.NoError(t, err)
	defer res.Body.Close()
	answer := make(chan map[string]any, 1)
	go func() {
		res, err := http.Post(apiURL+"/sendwait", "application/json", strings.NewReader(`{"conv":"c","text":"hi"}`))
		if err != nil {
			answer <- map[string]any{"error": err.Error()}
			return
		}
		defer res.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
			out = map[string]any{"error": err.Error()}
		}
		answer <- out
	}()
	var first struct{ Seq uint64 }
	require.NoError(t, json.NewDecoder(res.Body).Decode(&first))
	require.Equal(t, uint64(1), first.Seq)
	stop <- syscall.SIGTERM

	out := <-answer
	require.Equal(t, "answered", out["outcome"], "the call in flight at SIGTERM is answered: %v", out)
	require.Equal(t, "echo: hi", out["text"])
	select {
	case code := <-done:
		require.Equal(t, exitOK, code, "stderr: %s", stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatal("never stopped")
	}
	var rest []string
	for l := range lines {
		rest = append(rest, l)
	}
	member := strings.TrimSuffix(strings.TrimPrefix(ready, "lazarus-node "), " ready, control API "+apiURL)
	require.Equal(t, []string{"lazarus-node " + member + ": terminated, stopping", "lazarus-node " + member + " stopped"}, rest)
	_, err = http.Get(apiURL + "/healthz")
	require.Error(t, err, "the control API is closed")
	require.NotContains(t, stderr.String(), "level=ERROR", "a normal start and stop logs no error")
}

func freeTestPort(t *testing.T) int {
	t.Helper()
	p, err := freePorts(1)
	require.NoError(t, err)
	return p[0]
}

// TestSecondSignalForcesExit: a member process stopping gracefully after
// SIGTERM, held by a call in flight (its model call takes an hour), exits
// at once on a second signal (SIGINT here) with status 7 and says so on
// stderr: the call in flight gets no answer and the member never says it
// stopped.
func TestSecondSignalForcesExit(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	am := freeTestPort(t)
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self, "--postgres", dsn, "--automanaged-port", fmt.Sprint(am), "--seeds", fmt.Sprintf("127.0.0.1:%d", am),
		"--model-delay", "1h")
	cmd.Env = append(os.Environ(), asMain+"=1")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var werr error
	exited := make(chan struct{}) // closed once werr is set
	lines := make(chan string, 8)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		werr = cmd.Wait() // after the last read of stdout, as Wait closes it
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	// next is the next line of the member's own (the cluster's libraries
	// write to stdout too) that contains want.
	next := func(want string) string {
		t.Helper()
		timeout := time.After(60 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				require.True(t, ok, "exited before a line with %q: %s", want, stderr.String())
				if strings.HasPrefix(l, "lazarus-node ") && strings.Contains(l, want) {
					return l
				}
			case <-timeout:
				t.Fatalf("no line with %q", want)
			}
		}
	}
	ready := next(" ready, control API ")
	_, apiURL, found := strings.Cut(ready, " ready, control API ")
	require.True(t, found, "ready line: %q", ready)

	// A stream shows when the turn has begun: its user message is written,
	// and its model call takes an hour.
	res, err := http.Get(apiURL + "/stream?conv=c")
	require.NoError(t, err)
	defer res.Body.Close()
	answer := make(chan error, 1)
	go func() {
		res, err := http.Post(apiURL+"/sendwait", "application/json", strings.NewReader(`{"conv":"c","text":"hi"}`))
		if err == nil {
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			err = fmt.Errorf("answered %d: %s", res.StatusCode, b)
		}
		answer <- err
	}()
	var first struct{ Seq uint64 }
	require.NoError(t, json.NewDecoder(res.Body).Decode(&first))
	require.Equal(t, uint64(1), first.Seq)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	next(": terminated, stopping")
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatal("a second signal did not end the member")
	}
	var ee *exec.ExitError
	require.ErrorAs(t, werr, &ee, "stderr: %s", stderr.String())
	require.Equal(t, exitForced, ee.ExitCode(), "stderr: %s", stderr.String())
	require.Contains(t, stderr.String(), "lazarus-node: interrupt again, exiting now")
	for l := range lines {
		require.False(t, strings.HasPrefix(l, "lazarus-node ") && strings.HasSuffix(l, " stopped"), "the graceful stop did not finish: %q", l)
	}
	select {
	case err := <-answer:
		require.Error(t, err)
		require.NotContains(t, err.Error(), "answered", "the call in flight is not answered")
	case <-time.After(60 * time.Second):
		t.Fatal("the call in flight neither answered nor failed")
	}
}

// TestDemoInterrupted: a SIGINT (Ctrl-C) during the demo ends it with
// status 130 saying it was interrupted, after it removed its PostgreSQL's
// data directory, rather than dying at once and leaving the directory
// behind.
func TestDemoInterrupted(t *testing.T) {
	tmp, err := os.MkdirTemp("", "lazarus-node-demo-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	require.NoError(t, os.Chmod(tmp, 0o755)) // the server may run as another user
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self, "demo")
	cmd.Env = append(os.Environ(), asMain+"=1", "TMPDIR="+tmp)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var werr error
	exited := make(chan struct{}) // closed once werr is set
	waiting := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "waiting for the membership") {
				close(waiting)
			}
		}
		werr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	select {
	case <-waiting:
	case <-exited:
		t.Fatalf("the demo ended before its members started: %v: %s", werr, stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatal("the demo never started its members")
	}
	entries, err := os.ReadDir(tmp)
	require.NoError(t, err)
	require.NotEmpty(t, entries, "the demo's PostgreSQL keeps its data under TMPDIR")

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatal("SIGINT did not end the demo")
	}
	entries, err = os.ReadDir(tmp)
	require.NoError(t, err)
	require.Empty(t, entries, "the demo's PostgreSQL directory is removed")
	var ee *exec.ExitError
	require.ErrorAs(t, werr, &ee, "stderr: %s", stderr.String())
	require.Equal(t, 130, ee.ExitCode(), "stderr: %s", stderr.String())
	require.Contains(t, stderr.String(), "lazarus-node demo: interrupted")
}

// TestAutomanagedPortTaken: an --automanaged-port that another process
// holds fails the start with status 1 naming the flag, before the Runtime
// opens; the automanaged provider would only log its failure to serve
// the health endpoint, and the member would start without ever being a
// member of its own cluster.
func TestAutomanagedPortTaken(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	am := l.Addr().(*net.TCPAddr).Port
	stdoutR, stdoutW := io.Pipe()
	var stderr syncBuffer
	stop := make(chan os.Signal, 1)
	done := make(chan int, 1)
	go func() {
		defer stdoutW.Close()
		done <- run([]string{"--postgres", dsn, "--automanaged-port", fmt.Sprint(am), "--seeds", fmt.Sprintf("127.0.0.1:%d", am)},
			stdoutW, &stderr, stop, func(code int) { t.Errorf("forced out with status %d", code) })
	}()
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdoutR)
		for sc.Scan() {
			if strings.Contains(sc.Text(), " ready, ") {
				ready <- sc.Text()
			}
		}
	}()
	select {
	case code := <-done:
		require.Equal(t, exitError, code, "stderr: %s", stderr.String())
		require.Contains(t, stderr.String(), fmt.Sprintf("lazarus-node: --automanaged-port %d: ", am))
		require.Contains(t, stderr.String(), "address already in use")
	case l := <-ready:
		stop <- syscall.SIGTERM
		<-done
		t.Fatalf("started on a taken automanaged port: %q", l)
	case <-time.After(60 * time.Second):
		t.Fatal("neither failed nor started")
	}
}

// TestStopCutsCallsAfterTheGrace: a graceful stop waits for the control
// calls in flight at most stopGrace; one still running then (here a
// sendwait whose model call takes an hour) is cut, the member says so on
// stderr, closes the Runtime and exits 0 without waiting for the call.
func TestStopCutsCallsAfterTheGrace(t *testing.T) {
	grace := stopGrace
	stopGrace = 200 * time.Millisecond
	t.Cleanup(func() { stopGrace = grace })
	dsn := pgtest.NewDatabase(t)
	am := freeTestPort(t)
	stdoutR, stdoutW := io.Pipe()
	var stderr syncBuffer
	stop := make(chan os.Signal, 1)
	done := make(chan int, 1)
	go func() {
		defer stdoutW.Close()
		done <- run([]string{"--postgres", dsn, "--automanaged-port", fmt.Sprint(am), "--seeds", fmt.Sprintf("127.0.0.1:%d", am),
			"--model-delay", "1h"}, stdoutW, &stderr, stop, func(code int) { t.Errorf("forced out with status %d", code) })
	}()
	lines := make(chan string, 8)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdoutR)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var ready string
	select {
	case ready = <-lines:
	case code := <-done:
		t.Fatalf("exited %d before it was ready: %s", code, stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatal("never ready")
	}
	_, apiURL, found := strings.Cut(ready, " ready, control API ")
	require.True(t, found, "ready line: %q", ready)
	res, err := http.Get(apiURL + "/stream?conv=c")
	require.NoError(t, err)
	defer res.Body.Close()
	answer := make(chan error, 1)
	go func() {
		res, err := http.Post(apiURL+"/sendwait", "application/json", strings.NewReader(`{"conv":"c","text":"hi"}`))
		if err == nil {
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			err = fmt.Errorf("answered %d: %s", res.StatusCode, b)
		}
		answer <- err
	}()
	var first struct{ Seq uint64 }
	require.NoError(t, json.NewDecoder(res.Body).Decode(&first))
	require.Equal(t, uint64(1), first.Seq, "the turn has begun: sendwait is in flight")
	stop <- syscall.SIGTERM
	select {
	case code := <-done:
		require.Equal(t, exitOK, code, "stderr: %s", stderr.String())
	case <-time.After(15 * time.Second):
		t.Fatal("the stop waited for the call beyond its grace")
	}
	require.Contains(t, stderr.String(), "lazarus-node: control calls still running after 200ms are cut")
	select {
	case err := <-answer:
		require.Error(t, err)
		require.NotContains(t, err.Error(), "answered", "the call is cut, not answered")
	case <-time.After(15 * time.Second):
		t.Fatal("the call in flight neither answered nor failed")
	}
}

// TestSignalDuringTheStart: a first signal received before the member is
// up is taken once it is: the member prints its ready line, then that it
// stops and has stopped, and exits 0.
func TestSignalDuringTheStart(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	am := freeTestPort(t)
	stop := make(chan os.Signal, 1)
	stop <- syscall.SIGTERM
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"--postgres", dsn, "--automanaged-port", fmt.Sprint(am), "--seeds", fmt.Sprintf("127.0.0.1:%d", am)},
			&stdout, &stderr, stop, func(code int) { t.Errorf("forced out with status %d", code) })
	}()
	select {
	case code := <-done:
		require.Equal(t, exitOK, code, "stderr: %s", stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatal("never stopped")
	}
	require.Regexp(t, `^lazarus-node (\S+) ready, control API http://\S+\nlazarus-node (\S+): terminated, stopping\nlazarus-node (\S+) stopped\n$`, stdout.String())
}

// TestLogsWarningsByDefault: the member's logger writes warnings and
// errors to stderr without --verbose, and nothing below them; with
// --verbose, info and debug logs too.
func TestLogsWarningsByDefault(t *testing.T) {
	var quiet bytes.Buffer
	log := newLogger(&quiet, false)
	log.Debug("a debug line")
	log.Info("an info line")
	log.Warn("a warning line", "conversation", "c")
	log.Error("an error line")
	require.Contains(t, quiet.String(), `level=WARN msg="a warning line" conversation=c`)
	require.Contains(t, quiet.String(), `level=ERROR msg="an error line"`)
	require.NotContains(t, quiet.String(), "debug line")
	require.NotContains(t, quiet.String(), "info line")

	var verbose bytes.Buffer
	log = newLogger(&verbose, true)
	log.Debug("a debug line")
	log.Info("an info line")
	log.Warn("a warning line")
	for _, want := range []string{`level=DEBUG msg="a debug line"`, `level=INFO msg="an info line"`, `level=WARN msg="a warning line"`} {
		require.Contains(t, verbose.String(), want)
	}
}

// TestHelpAsAFlagValue: a help flag where a flag's value is expected
// (--postgres --help) asks for the usage, status 0, for every flag taking
// a value, also after an unknown flag, as the package documents; the flag
// package took it as the value (--postgres "--help"), and the member went
// on to refuse it as a DSN. A value that reads as a help flag is given
// with "=".
func TestHelpAsAFlagValue(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.Equal(t, exitOK, run([]string{"--help"}, &stdout, &stderr, nil, nil))
	var valued []string
	for _, line := range strings.Split(stderr.String(), "\n") {
		// "  -postgres string": a flag taking a value.
		head, _, _ := strings.Cut(line, "\t")
		if f := strings.Fields(head); len(f) == 2 && strings.HasPrefix(head, "  -") {
			valued = append(valued, "-"+f[0])
		}
	}
	require.Subset(t, valued, []string{"--postgres", "--seeds", "--http", "--port"}, stderr.String())
	for _, fl := range valued {
		for _, h := range []string{"--help", "-h"} {
			for _, args := range [][]string{{fl, h}, {fl, h, "x"}, {"--verbose", fl, h}, {"--nope", fl, h}} {
				var stderr bytes.Buffer
				_, err := parse(args, &stderr)
				require.ErrorIs(t, err, flag.ErrHelp, "%q", args)
				require.True(t, strings.HasPrefix(stderr.String(), "Usage of lazarus-node:"), "%q prints the usage: %s", args, stderr.String())
			}
		}
	}
	// With "=" it is the value, refused as a DSN.
	var stdout2, stderr2 bytes.Buffer
	require.Equal(t, exitUsage, run([]string{"--postgres=--help", "--automanaged-port", "1", "--seeds", "h:1"}, &stdout2, &stderr2, nil, nil))
	require.Contains(t, stderr2.String(), "--postgres: not a PostgreSQL connection string")
}
