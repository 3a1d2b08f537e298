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
// # Tools
//
// A tool is either a server tool (messages.Executor_EXECUTOR_SERVER), run
// in-process through Registry.RunServer, or a human tool
// (messages.Executor_EXECUTOR_HUMAN), answered from outside through the
// runtime's Resolve. Every call carries a tool_call_id minted by the runtime.
// A server tool may be run more than once with the same id (after a crash,
// the runtime re-dispatches a call that has no result), never with a new id
// for the same decision of the model: a tool with side effects uses the id as
// its idempotency key.
//
// # Scope
//
// A Scope is the caller's ambient state (user, permissions, handles). It is
// never persisted: every entry call supplies its own. Resolutions driven by
// an expired deadline run with SystemScope; a tool marked RequiresUser
// refuses it with a tool error of code CodeScope, which the model sees,
// instead of guessing a user.
package agent
