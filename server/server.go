package server

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
)

// Defaults of Options.
const (
	// DefaultOperatorRole is the role that sees everything and may act on
	// every conversation; its answers to human calls are checked by the
	// tools' rules (agent.Tool.Authorizer), as anyone's.
	DefaultOperatorRole = "operator"
	// DefaultMaxBodyBytes bounds a request body: room for a message of
	// journal.MaxEventBytes written as escaped JSON.
	DefaultMaxBodyBytes = 4 << 20
	// DefaultKeepAlive is how often an idle event stream gets a comment.
	DefaultKeepAlive = 15 * time.Second
	// DefaultStreamWriteTimeout bounds each write of an event stream.
	DefaultStreamWriteTimeout = time.Minute
	// DefaultPageSize is the page size of the listings when the request
	// gives no limit; MaxPageSize is the largest one accepted.
	DefaultPageSize = 50
	MaxPageSize     = 1000
	// DefaultMaxPageBytes bounds the events of a history page, as JSON.
	DefaultMaxPageBytes = 16 << 20
)

// Bounds for the http.Server that serves a Server, as lazarus serve sets
// them by default (its read_timeout and idle_timeout change the last two).
// A Server sets none itself: the application's http.Server does.
const (
	// DefaultReadHeaderTimeout bounds reading a request's headers, so that
	// a client sending them slowly does not hold a connection.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout bounds reading a whole request, its body
	// included, so that a client sending its body slowly does not hold a
	// handler. An event stream is a GET without a body: once its request
	// is read, the bound no longer applies, and it is never cut by it.
	DefaultReadTimeout = time.Minute
	// DefaultIdleTimeout is how long a keep-alive connection may wait for
	// its next request before it is closed. An event stream is a request
	// in progress, never idle: it is not cut.
	DefaultIdleTimeout = 2 * time.Minute
)

// Options configures a Server. The zero value of every field is a
// documented default; so is a negative MaxBodyBytes, KeepAlive,
// StreamWriteTimeout or MaxPageBytes (none of them means no bound).
type Options struct {
	// Authenticator identifies the caller of each /v1/ request. Default
	// nil: every such request is refused with 401 (the server fails
	// closed).
	Authenticator Authenticator
	// OperatorRole is the role that sees everything and may act on every
	// conversation (send, end, rewind, edit, fork, delete, schedule). An
	// operator's answer to a human call is checked by the call's tool's
	// rules like anyone's: a tool whose Authorizer refuses the operator
	// answers 403. Default DefaultOperatorRole.
	OperatorRole string
	// MaxBodyBytes bounds a request body; a larger one is refused with
	// 413 (code too_large) and nothing is written. Default (zero or
	// less) DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// KeepAlive is how often an event stream with nothing to send gets a
	// comment line, so proxies keep it open. Default (zero or less)
	// DefaultKeepAlive.
	KeepAlive time.Duration
	// StreamWriteTimeout bounds each write of an event stream (what is
	// ready to send, and its flush): a client that has not taken it in
	// after that long (it stopped reading, with its connection open) is
	// cut, and its stream and subscription end. Default (zero or less)
	// DefaultStreamWriteTimeout.
	StreamWriteTimeout time.Duration
	// MaxPageBytes bounds the events of a history page
	// (GET /v1/conversations/{id}/events), as JSON: the page holds the
	// newest of the events its limit asks for whose JSON sums to at most
	// this many bytes, and at least one, and its next_before resumes
	// before the oldest it holds. So a page of large events is not limit
	// times journal.MaxEventBytes. The full log's page (no agent, view
	// full) is read from the Store within this bound too
	// (lazarus.Runtime.HistoryWithin), so its read stops there; an agent's
	// or the effective view is read within it and one event more
	// (journal.MaxEventBytes; two with a bound below one event), by
	// lazarus.Runtime.HistoryView, which also reads the log after the page
	// a bounded read at a time to find the head. A page of a
	// conversation's schedules (GET /v1/conversations/{id}/schedules) is
	// bounded alike: the schedules after its cursor whose JSON fits, at
	// least one, and its next_cursor resumes after the last it holds (the
	// Store's read of them is whole: journal.ScheduleStore reads no part).
	// Default (zero or less) DefaultMaxPageBytes.
	MaxPageBytes int
	// Metrics is what /metrics exposes (see NewMetrics); pass the same
	// Metrics' Hooks to lazarus.Options.Metrics so that the runtime feeds
	// it. Default nil: the server makes its own, whose runtime-fed series
	// stay at zero.
	Metrics *Metrics
	// PublicMetrics serves /metrics without authentication. Default false:
	// /metrics needs the operator role.
	PublicMetrics bool
	// Logger receives the server's logs: failures answered 5xx, as
	// warnings, but for a request its client ended (it went away while its
	// call ran), which is logged at debug level. Default: discard.
	Logger *slog.Logger
	// NoConsole leaves out the web console (ConsolePath, and the redirect
	// of "/" to it). Default false: the console is served.
	NoConsole bool
}

func (o Options) withDefaults() Options {
	if o.OperatorRole == "" {
		o.OperatorRole = DefaultOperatorRole
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.KeepAlive <= 0 {
		o.KeepAlive = DefaultKeepAlive
	}
	if o.StreamWriteTimeout <= 0 {
		o.StreamWriteTimeout = DefaultStreamWriteTimeout
	}
	if o.MaxPageBytes <= 0 {
		o.MaxPageBytes = DefaultMaxPageBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	return o
}

// Server is the http.Handler of a Runtime's API. Its methods are safe for
// concurrent use. It does not own the Runtime: closing the Runtime ends the
// server's streams and makes its calls answer 503 (code closed).
type Server struct {
	rt   *lazarus.Runtime
	opts Options
	log  *slog.Logger
	mux  *http.ServeMux
	prom http.Handler // the exposition of opts.Metrics
	// cursors seals the listings' cursors that would name a row their
	// caller may not see.
	cursors cursors
	// crossOrigin refuses a browser's cross-origin request that is not
	// safe (POST, DELETE) before it runs.
	crossOrigin *http.CrossOriginProtection
	// routes lists the patterns of mux, for the test that compares them
	// with the OpenAPI document.
	routes []string
}

//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the API's OpenAPI 3 document (JSON), as served at
// /v1/openapi.json. The caller must not modify it.
func OpenAPI() []byte { return openAPI }

// New returns the handler of rt's API. It starts nothing and cannot fail.
func New(rt *lazarus.Runtime, opts Options) *Server {
	opts = opts.withDefaults()
	s := &Server{rt: rt, opts: opts, log: opts.Logger, mux: http.NewServeMux(), cursors: newCursors(),
		crossOrigin: http.NewCrossOriginProtection()}
	opts.Metrics.attach(rt)
	// A series that fails at scrape (a gauge counted from the Store, on a
	// Store error) is left out and logged, and the rest served; the
	// failures are counted in promhttp_metric_handler_errors_total.
	s.prom = promhttp.HandlerFor(opts.Metrics.reg, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
		Registry:      opts.Metrics.reg,
	})

	s.handle("GET /v1/openapi.json", s.openAPI)
	s.handle("GET /healthz", s.healthz)
	s.handle("GET /readyz", s.readyz)
	s.handle("GET /metrics", s.metrics)

	s.handleAuth("GET /v1/conversations", s.listConversations)
	s.handleAuth("POST /v1/conversations", s.createConversation)
	s.handleAuth("GET /v1/conversations/{id}", s.getConversation)
	s.handleAuth("DELETE /v1/conversations/{id}", s.deleteConversation)
	s.handleAuth("POST /v1/conversations/{id}/messages", s.sendMessage)
	s.handleAuth("GET /v1/conversations/{id}/events", s.history)
	s.handleAuth("GET /v1/conversations/{id}/stream", s.stream)
	s.handleAuth("POST /v1/conversations/{id}/end", s.endConversation)
	s.handleAuth("POST /v1/conversations/{id}/rewind", s.rewindConversation)
	s.handleAuth("POST /v1/conversations/{id}/edit", s.editMessage)
	s.handleAuth("POST /v1/conversations/{id}/fork", s.forkConversation)
	s.handleAuth("GET /v1/conversations/{id}/schedules", s.listSchedules)
	s.handleAuth("POST /v1/conversations/{id}/schedules", s.createSchedule)
	s.handleAuth("DELETE /v1/conversations/{id}/schedules/{schedule}", s.deleteSchedule)
	s.handleAuth("GET /v1/calls", s.listCalls)
	s.handleAuth("GET /v1/calls/{id}", s.getCall)
	s.handleAuth("POST /v1/calls/{id}/resolve", s.resolveCall)
	s.handleAuth("POST /v1/calls/{id}/reject", s.rejectCall)
	getOnly := []string{"/healthz", "/readyz", "/metrics"}
	if !opts.NoConsole {
		// The console is not part of the API: its routes are not in
		// s.routes (nor in the OpenAPI document).
		s.mux.Handle("GET "+ConsolePath+"{file...}", newConsoleHandler())
		s.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
			// A relative Location, which the browser resolves against
			// the URL it asked for: right under a prefix too.
			w.Header().Set("Location", "."+ConsolePath)
			w.WriteHeader(http.StatusFound)
		})
		// The console's path without its slash: the mux's own redirect
		// has an absolute Location, which leaves a prefix out.
		bare := strings.TrimSuffix(ConsolePath, "/")
		s.mux.HandleFunc("GET "+bare, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Location", "."+ConsolePath)
			w.WriteHeader(http.StatusFound)
		})
		getOnly = append(getOnly, ConsolePath, bare, "/{$}")
	}
	// Another method at the probes, /metrics and the console is a JSON
	// 405 (code method_not_allowed) with an Allow header, as every error
	// is JSON: the mux's own 405 is plain text.
	for _, path := range getOnly {
		s.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			s.methodNotAllowed(w, r, []string{http.MethodGet, http.MethodHead})
		})
	}
	// Anything else under /v1/ is a JSON 405 when a route has the path
	// with other methods, else a JSON 404.
	s.mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		if allow := s.allowed(r); len(allow) > 0 {
			s.methodNotAllowed(w, r, allow)
			return
		}
		s.writeError(w, r, errNotFound)
	})
	return s
}

// apiMethods are the methods the API's routes take (a GET route takes
// HEAD too).
var apiMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodDelete}

// allowed returns the methods of apiMethods that a route of the API takes
// at r's path: none when no route has it.
func (s *Server) allowed(r *http.Request) []string {
	var allow []string
	for _, m := range apiMethods {
		r2 := *r
		r2.Method = m
		if _, pattern := s.mux.Handler(&r2); pattern != "" && pattern != "/v1/" {
			allow = append(allow, m)
		}
	}
	return allow
}

// ServeHTTP implements http.Handler. Under /v1/, every segment of the
// path is taken as it is: a "." or ".." segment is an id (any string is
// one), not a step of the path, and an empty segment names nothing (404).
// http.ServeMux would clean such a path and redirect to what is left,
// another route: the DELETE of schedule ".." of a conversation, followed,
// deleted the conversation.
//
// Every answer is sent with X-Content-Type-Options: nosniff and, but for
// the console's files (which have their own), a Content-Security-Policy
// that lets nothing load or run and no page frame it: what the API
// answers holds what models and users wrote, and a browser must never
// take it for a page.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Content-Security-Policy", apiCSP)
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		raw, ok := literalPath(r.URL.EscapedPath())
		if !ok {
			s.writeError(w, r, errNotFound)
			return
		}
		if raw != r.URL.EscapedPath() {
			// The dot segments escaped, which the mux leaves as they
			// are and unescapes into the ids.
			r2 := *r
			u := *r.URL
			u.RawPath = raw
			r2.URL = &u
			r = &r2
		}
	}
	s.mux.ServeHTTP(w, r)
}

// apiCSP is the Content-Security-Policy of every answer but the console's
// files.
const apiCSP = "default-src 'none'; frame-ancestors 'none'"

// literalPath returns the escaped path p with its "." and ".." segments
// percent-encoded; ok is false when a segment other than the last is
// empty.
func literalPath(p string) (string, bool) {
	segs := strings.Split(p, "/")
	changed := false
	for i, seg := range segs {
		switch {
		case seg == "" && i > 0 && i < len(segs)-1:
			return "", false
		case seg == ".":
			segs[i], changed = "%2E", true
		case seg == "..":
			segs[i], changed = "%2E%2E", true
		}
	}
	if !changed {
		return p, true
	}
	return strings.Join(segs, "/"), true
}

// methodNotAllowed answers a method that r's path does not take: it takes
// allow (at least one).
func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request, allow []string) {
	w.Header().Set("Allow", strings.Join(allow, ", "))
	takes := allow[len(allow)-1]
	if len(allow) > 1 {
		takes = strings.Join(allow[:len(allow)-1], ", ") + " or " + takes
	}
	s.writeError(w, r, &apiError{status: http.StatusMethodNotAllowed, code: CodeMethodNotAllowed,
		msg: fmt.Sprintf("%s takes %s, not %s", r.URL.Path, takes, r.Method)})
}

func (s *Server) handle(pattern string, h http.HandlerFunc) {
	s.routes = append(s.routes, pattern)
	s.mux.HandleFunc(pattern, h)
}

// caller is the authenticated identity of a request.
type caller struct {
	agent.Identity
	operator bool
}

func (c caller) scope() agent.Scope { return agent.ScopeOf(c.Identity) }

// handleAuth registers a handler that runs only for an authenticated
// caller, and, for a method that is not safe (POST, DELETE), only for a
// request that is not a browser's from another origin: that one is
// refused (403 forbidden) before it runs, so that a page of another site
// cannot change anything with credentials the browser sends on its own (a
// cookie that an Authenticator or a proxy in front reads).
func (s *Server) handleAuth(pattern string, h func(http.ResponseWriter, *http.Request, caller)) {
	s.handle(pattern, func(w http.ResponseWriter, r *http.Request) {
		c, ok := s.authenticate(r)
		if !ok {
			s.writeError(w, r, &apiError{status: http.StatusUnauthorized, code: CodeUnauthenticated, msg: "authentication required"})
			return
		}
		if err := s.crossOrigin.Check(r); err != nil {
			s.writeError(w, r, &apiError{status: http.StatusForbidden, code: CodeForbidden,
				msg: "a cross-origin request from a browser may not change anything: " + err.Error()})
			return
		}
		h(w, r, c)
	})
}

func (s *Server) authenticate(r *http.Request) (caller, bool) {
	if s.opts.Authenticator == nil {
		return caller{}, false
	}
	id, ok := s.opts.Authenticator.Authenticate(r)
	if !ok || id.UserID == "" || id.UserID == agent.SystemUserID || agent.ValidateIdentity(id) != nil {
		// An authenticator that returns a nameless, system or oversized
		// identity is treated as a failed authentication.
		return caller{}, false
	}
	return caller{Identity: id, operator: id.HasRole(s.opts.OperatorRole)}, true
}

func (s *Server) openAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI)
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers 200 while the Runtime serves: it reads one page of the
// Store's index of pending calls, which fails once the Runtime is closed
// or the Store unreachable or slower than 5 s: 503, with the code of the
// failure. A probe its client ended is logged at debug level.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if _, _, err := s.rt.PendingCalls(ctx, "", 1); err != nil {
		// 503 whatever the error: a probe reads no other status as "not
		// ready" (a Store that timed out would have been a 504).
		_, code := classify(err)
		if clientGone(r, err) {
			s.log.Debug("server: readiness probe ended by its client", "code", code, "err", err)
		} else {
			s.log.Warn("server: not ready", "code", code, "err", err)
		}
		writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: errorDetail{Code: code,
			Message: publicMessage(http.StatusServiceUnavailable, code, err)}})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// decodeBody reads r's body (at most Options.MaxBodyBytes) into v: one
// JSON object of valid UTF-8 with no unknown field nor key given twice
// (see checkKeys) and nothing after it.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	return decodeJSON(body, v)
}

// decodeOptionalBody is decodeBody for a request whose body may be empty
// (v is then left as it is).
func (s *Server) decodeOptionalBody(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := s.readBody(w, r)
	if err != nil || len(bytes.TrimSpace(body)) == 0 {
		return err
	}
	return decodeJSON(body, v)
}

// readBody reads r's body, at most Options.MaxBodyBytes.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &apiError{status: http.StatusRequestEntityTooLarge, code: CodeTooLarge,
				msg: fmt.Sprintf("request body exceeds %d bytes", s.opts.MaxBodyBytes)}
		}
		return nil, &apiError{status: http.StatusBadRequest, code: CodeInvalid, msg: "reading the request body: " + err.Error()}
	}
	return body, nil
}

// decodeJSON decodes body into v: one JSON object of valid UTF-8 with no
// unknown field nor key given twice (see checkKeys) and nothing after it.
func decodeJSON(body []byte, v any) error {
	if !utf8.Valid(body) {
		return errInvalid("request body is not valid UTF-8")
	}
	t := bytes.TrimLeft(body, " \t\r\n")
	if len(t) == 0 {
		return errInvalid("request body is empty: want a JSON object")
	}
	if t[0] != '{' {
		// (json decodes null into a struct as nothing at all.)
		return errInvalid("request body: not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errInvalid("request body: " + err.Error())
	}
	if dec.More() {
		return errInvalid("request body: data after the JSON object")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errInvalid("request body: data after the JSON object")
	}
	if err := checkKeys(json.NewDecoder(bytes.NewReader(body)), reflect.TypeOf(v)); err != nil {
		return errInvalid("request body: " + err.Error())
	}
	return nil
}

var jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()

// checkKeys reads from dec the JSON value that was decoded into a value
// of type t, and reports a key of an object of a struct that names none of
// its fields exactly (encoding/json matches a key to a field whatever its
// case: "Text" would set text), and a key given twice in an object of a
// struct or a map (the last would win, unseen). Values of other types
// (and of those that decode themselves) are not looked into.
func checkKeys(dec *json.Decoder, t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if (t.Kind() != reflect.Struct && t.Kind() != reflect.Map) || reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		var skip json.RawMessage
		return dec.Decode(&skip)
	}
	tok, err := dec.Token()
	if err != nil || tok == nil { // null
		return err
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if seen[key] {
			return fmt.Errorf("key %q is given more than once", key)
		}
		seen[key] = true
		var vt reflect.Type
		if t.Kind() == reflect.Map {
			vt = t.Elem()
		} else if f, ok := fieldOfKey(t, key); ok {
			vt = f.Type
		} else {
			return fmt.Errorf("json: unknown field %q", key)
		}
		if err := checkKeys(dec, vt); err != nil {
			return err
		}
	}
	_, err = dec.Token() // '}'
	return err
}

// fieldOfKey returns the field of struct t whose JSON name is key.
func fieldOfKey(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		if f.IsExported() && name == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// query returns r's query parameters. A query that does not parse (a bad
// percent-escape, a semicolon) is a bad request: net/url drops such a
// pair, and the route would run as if it had not been given.
func query(r *http.Request) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, errInvalid("malformed query: " + err.Error())
	}
	return q, nil
}

// queryParam returns the value of r's query parameter name ("" when
// absent) and whether it is given. One given more than once is a bad
// request (its first value would win, unseen), as is a malformed query.
func queryParam(r *http.Request, name string) (string, bool, error) {
	q, err := query(r)
	if err != nil {
		return "", false, err
	}
	switch vs := q[name]; len(vs) {
	case 0:
		return "", false, nil
	case 1:
		return vs[0], true, nil
	}
	return "", false, errInvalid("query parameter " + name + " is given more than once")
}

// pageParams reads the "limit" query parameter (default DefaultPageSize
// when absent, 1..MaxPageSize, digits only as uintParam's) and "cursor".
func pageParams(r *http.Request) (string, int, error) {
	limit := DefaultPageSize
	v, given, err := queryParam(r, "limit")
	if err != nil {
		return "", 0, err
	}
	if given { // an empty one too: it is no absent one
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n < 1 || n > MaxPageSize {
			return "", 0, errInvalid(fmt.Sprintf("limit must be an integer in 1..%d", MaxPageSize))
		}
		limit = int(n)
	}
	cursor, _, err := queryParam(r, "cursor")
	if err != nil {
		return "", 0, err
	}
	return cursor, limit, nil
}

// uintParam reads an unsigned query parameter (0 when absent): decimal
// digits only, no sign, and at least one (an empty value is no absent
// one).
func uintParam(r *http.Request, name string) (uint64, error) {
	v, given, err := queryParam(r, name)
	if err != nil || !given {
		return 0, err
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, errInvalid(name + " must be an unsigned integer")
	}
	return n, nil
}
