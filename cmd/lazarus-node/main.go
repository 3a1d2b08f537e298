// Command lazarus-node runs one member of a Lazarus cluster on a shared
// PostgreSQL journal, with a scripted echo model and a small JSON control
// API, for the multi-process cluster tests (tests/cluster) and the cluster
// demo (make demo-cluster). It is a test and demo tool, not a server: the
// application's server is `lazarus serve`.
//
//	lazarus-node --postgres DSN --port 7001 --automanaged-port 7101 \
//	    --seeds 127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103 --http 127.0.0.1:7201
//
// The model answers a user message "echo: TEXT"; a message "tool: X" makes
// it call the server tool "stamp" first, and "ask: X" the human tool
// "approve" (whose deadline is --human-timeout). --model-delay is how long
// every model call takes, so a node can be killed mid-turn.
//
// Control API (JSON):
//
//	POST /send     {"conv","text","request_id"} -> {"seq","node","owner"}
//	POST /sendwait {"conv","text"}              -> {"outcome","text","pending"}
//	POST /resolve  {"tool_call_id","result"}    -> {}
//	POST /kill?conv=ID                          -> {"killed"}
//	GET  /members                               -> {"self","members"}
//	GET  /owner?conv=ID                         -> {"owner"}
//	GET  /stream?conv=ID&after=N                -> one line per event: {"seq","kind","node"}
//	GET  /stats                                 -> {"fenced"}
//	GET  /healthz                               -> "ok"
//
// A failed call answers {"error","code"}: code is the sentinel the error
// wraps (see errorCode), "internal" for an error that wraps none. fenced
// counts the activations of this member retired because the Store's fence
// refused their write (lazarus.Metrics.Fenced). On SIGTERM the member
// stops taking control calls, answers those in flight (each is bounded by
// its own timeout), then closes the Runtime.
//
// `lazarus-node demo` (make demo-cluster) runs three members of itself and
// a throwaway PostgreSQL (PG_BINDIR), kills one mid-turn with SIGKILL, and
// prints where each conversation lived and whether its log is whole.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "demo" {
		if err := demo(); err != nil {
			fmt.Fprintln(os.Stderr, "lazarus-node demo: FAILED:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "lazarus-node:", err)
		os.Exit(1)
	}
}

func run() error {
	dsn := flag.String("postgres", "", "PostgreSQL DSN of the shared journal (required)")
	port := flag.Int("port", 0, "remote port of this member")
	amPort := flag.Int("automanaged-port", 0, "automanaged health port of this member")
	seeds := flag.String("seeds", "", "comma-separated automanaged host:port of every member")
	httpAddr := flag.String("http", "127.0.0.1:0", "address of the control API")
	delay := flag.Duration("model-delay", 50*time.Millisecond, "duration of every model call")
	humanTimeout := flag.Duration("human-timeout", 3*time.Second, "deadline of the approve tool")
	verbose := flag.Bool("verbose", false, "debug logs on stderr")
	flag.Parse()
	if *dsn == "" {
		return errors.New("--postgres is required")
	}
	var fenced atomic.Int64
	logger := slog.New(slog.DiscardHandler)
	if *verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	rt, err := lazarus.Open(lazarus.Options{
		Postgres:    *dsn,
		Model:       echoModel(*delay),
		Tools:       tools(*humanTimeout),
		IdleTimeout: -1,
		Logger:      logger,
		Metrics:     lazarus.Metrics{Fenced: func() { fenced.Add(1) }},
		Cluster: &lazarus.ClusterOptions{
			Port:            *port,
			AutoManagedPort: *amPort,
			Seeds:           strings.Split(*seeds, ","),
		},
	})
	if err != nil {
		return err
	}
	// Streams never end by themselves: the shutdown ends them.
	streams, endStreams := context.WithCancel(context.Background())
	defer endStreams()
	srv := &http.Server{Addr: *httpAddr, Handler: api(rt, &fenced, streams), ReadHeaderTimeout: 5 * time.Second}
	srv.RegisterOnShutdown(endStreams)
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	fmt.Printf("lazarus-node %s ready\n", rt.Address())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
	case err = <-errc:
	}
	// Longer than the longest control call (sendwait's 20 s), so that
	// every call in flight is answered before the Runtime closes.
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	if cerr := rt.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// echoModel answers the last user message (see the package doc).
func echoModel(delay time.Duration) agent.Model {
	return agent.ModelFunc(func(ctx context.Context, turn agent.Turn, onDelta func(string)) (*messages.AssistantMessage, error) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		evs := turn.Context
		if len(evs) == 0 {
			return agent.Text("nothing to answer"), nil
		}
		last := evs[len(evs)-1]
		if last.GetToolResult() != nil {
			return agent.Text("done"), nil
		}
		text := ""
		for _, p := range last.GetUserMsg().GetContent() {
			text += p.GetText()
		}
		switch {
		case strings.HasPrefix(text, "tool:"):
			return agent.Reply("", agent.Call("stamp", `{}`)), nil
		case strings.HasPrefix(text, "ask:"):
			return agent.Reply("", agent.Call("approve", `{}`)), nil
		}
		if onDelta != nil {
			onDelta("echo: " + text)
		}
		return agent.Text("echo: " + text), nil
	})
}

func tools(humanTimeout time.Duration) []agent.Tool {
	return []agent.Tool{
		{Name: "stamp", Description: "stamps", Executor: messages.Executor_EXECUTOR_SERVER,
			Run: func(ctx context.Context, inv agent.Invocation) (string, error) {
				return strconv.Quote(inv.ToolCallID), nil
			}},
		{Name: "approve", Description: "asks a human", Executor: messages.Executor_EXECUTOR_HUMAN, Timeout: humanTimeout},
	}
}

// errorCode is the stable code of a failed call: the first sentinel of the
// Runtime's contract the error wraps ("closed" for lazarus.ErrClosed,
// "unknown_outcome", "no_owner", "deadline_exceeded", "canceled"), else
// the journal's code in lower case without its prefix ("conflict",
// "unavailable", "stale", "invalid", ...; journal.ErrorToProto), which is
// "internal" for an error that wraps no sentinel.
func errorCode(err error) string {
	switch {
	case errors.Is(err, lazarus.ErrClosed):
		return "closed"
	case errors.Is(err, lazarus.ErrUnknownOutcome):
		return "unknown_outcome"
	case errors.Is(err, lazarus.ErrNoOwner):
		return "no_owner"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	code := journal.ErrorToProto(err).GetCode().String()
	return strings.ToLower(strings.TrimPrefix(code, "ERROR_CODE_"))
}

// api is the control API; streams ends the /stream calls when it ends.
func api(rt *lazarus.Runtime, fenced *atomic.Int64, streams context.Context) http.Handler {
	mux := http.NewServeMux()
	write := func(w http.ResponseWriter, v any, err error) {
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error(), "code": errorCode(err)})
			return
		}
		_ = json.NewEncoder(w).Encode(v)
	}
	// decode reads a request body; a bad one is the caller's error.
	decode := func(r *http.Request, v any) error {
		if err := json.NewDecoder(r.Body).Decode(v); err != nil {
			return fmt.Errorf("control API: request body: %w: %w", err, journal.ErrInvalid)
		}
		return nil
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		write(w, map[string]int64{"fenced": fenced.Load()}, nil)
	})
	mux.HandleFunc("GET /members", func(w http.ResponseWriter, _ *http.Request) {
		write(w, map[string]any{"self": rt.Address(), "members": rt.Members()}, nil)
	})
	mux.HandleFunc("GET /owner", func(w http.ResponseWriter, r *http.Request) {
		write(w, map[string]string{"owner": rt.Owner(r.URL.Query().Get("conv"))}, nil)
	})
	mux.HandleFunc("POST /send", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Conv      string `json:"conv"`
			Text      string `json:"text"`
			RequestID string `json:"request_id"`
		}
		if err := decode(r, &in); err != nil {
			write(w, nil, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		owner := rt.Owner(in.Conv)
		msg := agent.UserMessage(agent.TextPart(in.Text))
		seq, err := rt.SendMessage(ctx, in.Conv, msg, lazarus.SendOptions{RequestID: in.RequestID}, agent.Scope{UserID: "tester"})
		write(w, map[string]any{"seq": seq, "node": rt.Address(), "owner": owner}, err)
	})
	mux.HandleFunc("POST /sendwait", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Conv string `json:"conv"`
			Text string `json:"text"`
		}
		if err := decode(r, &in); err != nil {
			write(w, nil, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
		defer cancel()
		end, err := rt.SendAndWait(ctx, in.Conv, in.Text, agent.Scope{UserID: "tester"})
		var pending []string
		for _, p := range end.Pending {
			pending = append(pending, p.GetToolCallId())
		}
		write(w, map[string]any{"outcome": end.Outcome.String(), "text": end.Text, "pending": pending}, err)
	})
	mux.HandleFunc("POST /kill", func(w http.ResponseWriter, r *http.Request) {
		write(w, map[string]bool{"killed": rt.Kill(r.URL.Query().Get("conv"))}, nil)
	})
	mux.HandleFunc("POST /resolve", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			ToolCallID string `json:"tool_call_id"`
			Result     string `json:"result"`
		}
		if err := decode(r, &in); err != nil {
			write(w, nil, err)
			return
		}
		err := rt.Resolve(r.Context(), in.ToolCallID, in.Result, agent.Scope{UserID: "tester"})
		write(w, map[string]any{}, err)
	})
	mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		defer context.AfterFunc(streams, cancel)()
		ch, err := rt.Subscribe(ctx, r.URL.Query().Get("conv"), after)
		if err != nil {
			write(w, nil, err)
			return
		}
		fl, _ := w.(http.Flusher)
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		if fl != nil {
			fl.Flush()
		}
		enc := json.NewEncoder(w)
		for u := range ch {
			if u.Event == nil {
				continue
			}
			kind := fmt.Sprintf("%T", u.Event.GetBody())
			if enc.Encode(map[string]any{"seq": u.Event.GetSeq(), "kind": kind}) != nil {
				return
			}
			if fl != nil {
				fl.Flush()
			}
		}
	})
	return mux
}
