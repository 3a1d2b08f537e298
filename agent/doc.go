// Package agent holds the provider-neutral contracts between the Lazarus
// runtime, the model and the tools: the Model interface and the Turn it is
// given, the Tool definitions and their Registry, and the caller's Scope.
//
// The package is pure: it starts no goroutines and does no I/O of its own.
// A Model or a server tool does whatever I/O it needs; the runtime calls them
// from goroutines it owns, never from an actor's own goroutine.
//
// # Messages
//
// TextPart, ImagePart, FilePart and UserMessage build what a user sends;
// Text, Reply and Call build what a Model answers.
//
// # Tool pairing
//
// Providers refuse a history in which a tool call lacks its result, a
// result lacks its call, or a call has two results (400, on every later
// turn too). The runtime gives a Model a Turn whose Context pairs every
// call with exactly one result (PairResults), whatever a damaged or
// imported log holds: an orphan result and a second result are left out
// (the first stands), and a call the log holds with no result, which
// nothing owes, is answered with an error result of code CodeMissing the
// model reads. The adapters (agent/openai, agent/anthropic) pair again and
// move each result right after its call (openai.ResultsAfterCalls).
//
// # Tools
//
// A tool is either a server tool (messages.Executor_EXECUTOR_SERVER), run
// in-process through Registry.RunServer, or a human tool
// (messages.Executor_EXECUTOR_HUMAN), answered from outside through the
// runtime's Resolve. Every call carries a tool_call_id minted by the runtime.
// A server tool may be run more than once with the same id (after a crash,
// the runtime re-dispatches a call that has no result), never with a new id
// for the same decision of the model: a tool with side effects uses the id as
// its idempotency key. Within one process two runs of one id never overlap:
// a run re-dispatched after a kill waits until the killed activation's run
// has returned.
//
// # Scope
//
// A Scope is the caller's ambient state (user, roles, permissions,
// handles). Every entry call supplies its own. Only its Identity (UserID and
// Roles) is ever persisted: as the author of a user message, the requester
// of the tool calls of that turn, and the resolver of a human call's answer.
// Tools run for the requester, never for a resolver; when the runtime
// resumes a turn on its own, a ScopeLoader may rebuild the requester's
// scope, else it runs under SystemScope, which a tool marked RequiresUser
// refuses with a tool error of code CodeScope (the model sees it) instead of
// guessing a user.
//
// # Who may answer
//
// A human tool's Authorizer (RequireRole, RequesterOnly, AnyOf, or the
// application's own) and AllowAnonymous decide who may answer its calls:
// Tool.Authorize, which the runtime's Resolve and Reject apply before they
// write anything; a refusal wraps ErrForbidden.
package agent
