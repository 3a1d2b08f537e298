// Package server serves a *lazarus.Runtime over HTTP: a JSON API under
// /v1/, its OpenAPI 3 document at /v1/openapi.json, live events as
// server-sent events, Prometheus metrics at /metrics, and health (/healthz)
// and readiness (/readyz) probes. New returns an http.Handler that an
// application mounts in its own http.Server; it starts no goroutine of its
// own (each streaming request runs on its handler's goroutine).
//
// # Routes
//
//	GET    /v1/conversations                    list (paged, with status and metadata; metadata[KEY]=VALUE filters)
//	POST   /v1/conversations                    create, with metadata and model settings; 201
//	GET    /v1/conversations/{id}               one conversation
//	DELETE /v1/conversations/{id}               delete; 204
//	POST   /v1/conversations/{id}/messages      send a user message; 202 once durable
//	GET    /v1/conversations/{id}/events        history, newest page first (before, limit, agent, view=full|effective)
//	GET    /v1/conversations/{id}/stream        server-sent events after a seq
//	POST   /v1/conversations/{id}/end           end it for good (Runtime.End); 200 with the conversation
//	POST   /v1/conversations/{id}/rewind        move the head back to to_seq (Runtime.Rewind); 200 with the conversation
//	POST   /v1/conversations/{id}/edit          replace the user message at seq (Runtime.Edit); 202 with the new seq
//	POST   /v1/conversations/{id}/fork          copy the history up to at_seq into a new conversation (Runtime.Fork); 201
//	GET    /v1/conversations/{id}/schedules     its pending scheduled wake-ups (Runtime.Schedules), paged: cursor, within Options.MaxPageBytes
//	POST   /v1/conversations/{id}/schedules     schedule a wake-up: at, after, every or cron, and text (Runtime.Schedule); 201
//	DELETE /v1/conversations/{id}/schedules/{s} cancel one (Runtime.CancelSchedule); 204, or 404 not_found "no schedule ... in conversation ..."
//	GET    /v1/calls                            pending human calls (paged)
//	GET    /v1/calls/{id}                       one call: tool, prompt, arguments, deadline, status and outcome
//	POST   /v1/calls/{id}/resolve               answer it with a JSON result
//	POST   /v1/calls/{id}/reject                decline it with a reason
//	GET    /v1/openapi.json                     the API's OpenAPI 3 document
//	GET    /metrics  /healthz  /readyz
//	GET    /console/                            the web console (not part of the API); / and /console redirect to it
//
// A method a route does not take (a PUT, a DELETE of a call, a POST of
// the console) is a 405 method_not_allowed whose Allow header lists those
// it takes (GET, HEAD for a GET route), before any authentication: the
// routes are public. A path no route has is a 404 not_found.
//
// An id in a path is percent-encoded ('/' as %2F, as url.PathEscape
// does); every segment under /v1/ is taken as it is: "." and ".." are ids
// (any string is one), not steps of the path, and an empty segment is a
// 404 (browsers, which resolve dot segments, cannot name such an id).
//
// A call (Call) has the status of its stored row ("pending", "resolved",
// "errored", "expired") and an outcome that says how it ended, from that
// status and the code of its error result: "pending", "answered" (a
// resolve), "rejected" (a reject), "expired" (its deadline passed first),
// "cancelled" (a rewind or an edit of its conversation took it back while
// it was open: no one answered it, and it has no resolver), "errored" (an
// error of another code) or "unknown" (a stored status this server does
// not know). A resolution event of the log has the status only; the
// tool_result event written with it has the error's code. The answer of a
// resolve or a reject (Answered) is the call's id with the status and the
// outcome it gave: "resolved" and "answered", "errored" and "rejected".
//
// # Identity and what a user may see
//
// Every /v1/ route but the OpenAPI document authenticates the request
// (Options.Authenticator, for example BearerTokens) into an agent.Identity:
// a user id and roles. The identity is the scope of the calls the server
// makes for the request: the requester of a message it sends, the resolver
// the log records for an answer.
//
//   - A conversation created through the API records its creator's user id
//     in its metadata under OwnerKey. Only its owner and operators (the
//     role Options.OperatorRole) see it, send to it, read or stream its
//     events, end, rewind, edit, fork and delete it, and list, create and
//     cancel its schedules. A fork is owned by
//     whoever forked it (an operator who forks a user's conversation owns
//     the copy), with a new id the server mints, as a created one. A
//     conversation without an owner (made by Go code) is seen by
//     operators only; an application grants a user one by
//     setting OwnerKey with Runtime.MergeMetadata. Keys under
//     ReservedMetadataPrefix cannot be set through the API. Records under
//     an id without a conversation row (metadata a creation left behind
//     when it failed part-way, which no lookup or listing shows) are
//     deleted by DELETE, 204, as Runtime.Delete does, for operators and
//     the owner that metadata names; anyone else gets 404.
//   - A pending human call is seen by operators, by the owner of its
//     conversation, and by users whom the call's tool has an Authorizer
//     that allows (agent.Tool.Authorize, asked as for a Resolve): an
//     approver sees the calls of the tools they may approve. A tool
//     without an Authorizer accepts any identified resolver in the Go API;
//     over HTTP its calls are still shown only to the owner and operators.
//     An answer is then checked again by the Runtime with the tool's rules.
//
// # Status codes
//
// A request without valid credentials gets 401 (code "unauthenticated"):
// with BearerTokens, one with no Authorization header, a malformed or
// unknown token, or more than one Authorization header (whatever they
// hold: the server does not pick one).
// A resource that does not exist and one the caller may not see get the
// same 404 (code "not_found"), so ids cannot be probed; a deleted
// conversation is 410 ("deleted") only to those who could see it (its
// metadata, owner included, went with it: operators). A human call of a
// deleted conversation is 404 to everyone, operators included: its row
// went with the conversation, and a Store keeps a tombstone of the
// conversation's id only, so /v1/calls/{id} cannot tell it from a call
// that never was. 403 ("forbidden") is
// for an action on something the caller sees but may not do: an answer the
// call's tool refuses, /metrics without the operator role; and for a
// browser's POST or DELETE from another origin (http.CrossOriginProtection:
// Sec-Fetch-Site cross-site or same-site, or else an Origin whose host is
// not the request's), refused before it runs, so that a page of another
// site cannot change anything with credentials the browser sends on its
// own (a cookie an Authenticator, or a proxy in front, reads). Programs,
// which send neither header, and the console, same origin, are served. An answer to a
// call whose conversation is deleted while it is made is 409 stale (the
// call went with it), or 410 deleted when the tool's authorizer read the
// deleted conversation (its error wraps journal.ErrDeleted). Errors are a JSON
// object {"error":{"code":..., "message":...}}: the message of a 4xx says
// what was wrong with the request (cut after 1 KiB, so that one quoting a
// large field is not the field's size); that of a 5xx is a fixed text of its
// code, the error itself going to Options.Logger (it may name the store's
// files or the database's address). The code of each sentinel is stable:
//
//	journal.ErrInvalid, a malformed body or query    400 invalid
//	a body over Options.MaxBodyBytes                 413 too_large
//	journal.ErrNotFound                              404 not_found
//	a method the route does not take (Allow: the
//	  methods it takes)                              405 method_not_allowed
//	journal.ErrStale (a call already answered)       409 stale
//	journal.ErrConflict, journal.ErrExists           409 conflict
//	journal.ErrDeleted                               410 deleted
//	journal.ErrEnded (a send, edit, rewind or
//	  schedule of an ended conversation, an
//	  answer to a call it holds)                     409 ended
//	lazarus.ErrForbidden                             403 forbidden
//	lazarus.ErrUnknownOutcome (and journal's)        504 unknown_outcome
//	context.DeadlineExceeded (lazarus.Options.
//	  CallTimeout)                                   504 timeout
//	lazarus.ErrClosed, journal.ErrClosed             503 closed
//	journal.ErrUnavailable, ErrNoSpace, a request
//	  cancelled by its client                        503 unavailable
//	lazarus.ErrTooManySubscriptions (a stream of a
//	  conversation with lazarus.Options.
//	  MaxSubscriptions open already)                 429 too_many_subscriptions
//	errors.ErrUnsupported (the schedule routes on a
//	  Store that keeps none)                         501 unsupported
//	anything else                                    500 internal
//
// A 429 too_many_subscriptions carries a Retry-After header of
// RetryAfterTooManySubscriptions (5) seconds, and a 503 unavailable one of
// RetryAfterUnavailable (1): hints of when to try again, nothing promised.
// A 503 closed carries none (the Runtime will not serve again, and when a
// restarted one will is not known), nor does /readyz's 503, for probes.
//
// unknown_outcome means the write may or may not have happened: a send
// retried with the same request_id appends nothing twice, a resolve retried
// gets 409 stale if an answer was recorded. A write that landed is never
// answered with an error: a create, end, rewind or fork whose conversation
// cannot be read again right after it (the Store failing then) still gets
// its 200 or 201, with the conversation's id and metadata, the status the
// write set ("unspecified" when it does not tell) and no times. A bad request writes nothing:
// bodies are read whole (at most Options.MaxBodyBytes), must be valid UTF-8
// and one JSON object with no unknown field (a key is matched as written,
// case included) and no key given twice, and are validated as the Go
// API validates them before any call that writes. Integer query parameters
// (limit, before, after) are decimal digits only: a sign, or no digit at
// all (an empty value, as limit=), is 400 invalid, as is an empty view or
// agent. So is a query parameter given more than once (metadata[KEY] included),
// as is a stream's Last-Event-ID header, and a query that does not parse
// (a bad percent-escape, a semicolon): none is read as the route's
// default. A metadata[KEY] of an empty value is 400 invalid too: no
// stored value is empty (an empty one deletes its key), so it would match
// nothing.
//
// # Live events
//
// GET /v1/conversations/{id}/stream sends, as text/event-stream, the
// conversation's events after the seq given by the Last-Event-ID header or
// else the "after" query parameter (default 0, the whole log; not read when
// the header is given with a value: an empty one counts as absent, and one
// given twice is a bad request): first those in the log, then each new one once
// durable, with no gap and no duplicate across kills and revivals of the
// conversation's actor. A seq past the
// log's last event is a bad request (400 invalid, naming the last seq): it
// is no cursor of this conversation's. A HEAD request is answered with the
// status and headers a GET would get, and ends. In a cluster, that is
// the status of the member asked (its own subscription cap, closed): a
// GET's stream starts before the conversation's owner answers, and the
// owner's refusal ends it with an error message (see below), which a
// HEAD, without a body, does not wait for. Messages:
//
//	event: event      id: <seq>   data: the event (protobuf JSON, proto field names)
//	event: delta                  data: {"text": "..."}  streamed text, not durable
//	event: turn_end               data: {"outcome": "answered"|"suspended"|"failed"|"cancelled", "seq": N, "error": "..."}
//	event: retry                  data: {"attempt": N, "delay_ms": N, "error": "..."}  a model call is tried again
//	event: restart                data: {}  the deltas since the last event are void (an abandoned model call)
//	event: error                  data: {"error": {"code": ..., "message": ...}}; the stream ends
//
// A failed turn ends with a durable turn_failed event (then a turn_end
// "failed"), or, for a write that failed, a turn_end "failed" alone. A
// "restart" comes before "retry" and before the turn_end "cancelled" of a
// kill when deltas had been streamed, and alone when a newer message
// abandons the model call; after it, the deltas are those of the new call,
// from its start: drop the text shown so far. Only
// "event" messages carry an id, so a reconnecting client's
// Last-Event-ID is the seq of the last event it received. On every
// connection, the deltas sent before the first live update are the whole
// answer in progress so far (the Runtime's subscriptions replay it), so a
// client that reconnects in the middle of an answer replaces its partial
// text with them. A comment line is sent every Options.KeepAlive while
// nothing else is. A stream that falls too far behind ends with an error of
// code "lagged": reconnect with Last-Event-ID. A stream of a conversation
// that has lazarus.Options.MaxSubscriptions subscriptions open already is
// refused with 429 too_many_subscriptions (in a cluster, the owner's
// refusal of a stream another member forwarded ends it with an error of
// that code): connect again once one has ended. A stream ends with the code "closed" when the Runtime closes,
// and when its request's context is cancelled with a cause wrapping
// lazarus.ErrClosed
// (context.WithCancelCause: how an application that shuts its
// http.Server down ends the streams first, as lazarus serve does):
// reconnect once the server is back. A client that stops reading
// with its connection open is cut once a write to it has waited
// Options.StreamWriteTimeout (default a minute), and its subscription ends.
//
// # Web console
//
// ConsolePath serves a web console for people: plain HTML, CSS and
// JavaScript embedded in the binary (no build step, nothing fetched at run
// time), usable on a phone and with the keyboard alone (an answer leaves
// the focus in its card, on what it did); "/" and ConsolePath without its
// slash redirect to it with a relative Location, and it calls the API by
// relative URLs, so it works under a prefix (http.StripPrefix) too. It
// has the queue of pending human calls the user may see (tool, prompt,
// arguments, the last events of the conversation when the user may read
// it, a countdown to the deadline),
// each answered with Approve (POST resolve with the result
// {"approved": true}, plus "reason" when one is typed) or Reject (POST
// reject with the typed reason, required, also sent by Enter in the reason
// field, which never approves; a reason typed stays in its card
// while the tab looks at another view; a reason is taken up to what the
// server takes, agent.MaxResultBytes of the answer, a longer one refused
// in the card before anything is sent, and a rejection whose reason is
// over agent.MaxErrorBytes, recorded cut there, says so); the conversation list with a
// search by metadata ("key=value key=value"); and a live view of a
// conversation (its history, then its event stream, with the answer in
// progress; with named agents, each event names its agent and a handoff
// the agents it passes the turn between) with a box to send a message
// (sent again after a failure with the same request_id, so written once).
// A conversation whose id is "." or ".." is not read nor written there (a
// browser takes such a segment of a URL path for a step of the path): the
// console says so, and the API serves it.
// A call answered elsewhere in the
// meantime is shown as already answered, with its outcome and, when a
// person answered it, by whom; one a rewind took back, as cancelled; one
// whose conversation was deleted (404, or 410 deleted), as gone; one still
// pending in a conversation that has ended (409 ended), as one that can
// no longer be answered, its buttons off (GET /v1/calls still lists such
// a call until its deadline expires it, for good if it has none; End
// refuses while a call is open, so only an import cut short leaves one:
// the tab shows it as ended while it is signed in). An
// answer of unknown outcome (504 unknown_outcome, a 504 of a gateway in
// front, or no answer at all: a connection cut after the request went
// out, or none within a minute, twice lazarus.DefaultCallTimeout, after
// which the console gives the request up) is never shown as not
// answered: the console reads the call again (a read it gives up after a
// minute too) and shows it answered if it is, else says the outcome is
// unknown and lets the user answer again (a second answer to a call
// already answered gets 409 stale); nor is a message sent so (no answer
// within a minute included) shown as not sent. A
// resolution event names its resolver only when a person answered (not
// for an expiry, nor in an older log that records none). The console only
// calls the /v1/ API, with the same rules of who sees what; an approver
// who may not read a call's conversation sees its prompt and arguments
// only, so a tool's Prompt should say what the approver needs to know.
//
// Authentication: the console asks for a bearer token, checks it with one
// API call and keeps it in the tab's sessionStorage (gone when the tab
// closes, never in a cookie, so there is no ambient credential and nothing
// to forge across sites; a POST or DELETE from another origin is refused
// all the same, see Status codes). Every request, event streams included, sends it
// in the Authorization header: streams are read with fetch and a
// ReadableStream, not EventSource (which cannot send headers), and resume
// with Last-Event-ID when they end lagged or by the server's doing (a
// restart ends them with the code closed); one refused at the
// conversation's subscription cap (429 too_many_subscriptions, or an error
// of that code) is asked for again after its Retry-After (else
// RetryAfterTooManySubscriptions), the view saying why it waits; one
// refused otherwise for now (a 5xx, 408, or another 429, which waits its
// Retry-After too) is asked for again with the server's message shown.
// Other ends and refusals are followed by a backoff (1s, doubling up to 15s)
// that starts again from 1s only after a stream that showed a new event or
// stayed open 10s, so a stream that keeps ending at once is not asked for
// every second. The files are served without credentials (they hold
// no data) with a Content-Security-Policy that allows only the console's
// own script, style and API (no inline script, no image, no framing; Trusted
// Types with no policy, so a string written as HTML throws), and the script
// writes every value as text, never as HTML. Every other answer (the
// API's JSON, its event streams) is sent with X-Content-Type-Options
// nosniff and a Content-Security-Policy that runs nothing and forbids
// framing: a browser never takes what models and users wrote for a page. Options.NoConsole leaves the
// console out.
package server
