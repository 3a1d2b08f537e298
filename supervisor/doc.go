// Package supervisor is the root of a Lazarus runtime's actors: it owns the
// journal actor, the expiry actor and one conversation actor per live
// conversation.
//
// Activation: Ask (and the expiry actor's deliveries) ensure a conversation
// has exactly one live activation, spawning and reviving it on demand, even
// under concurrent callers. Passivation: an idle conversation actor asks the
// activation registry to retire it, which succeeds only if it has processed
// every command sent to it, so no command is ever lost to a passivating
// actor. Restart policy: a failing conversation actor is stopped, not
// restarted in place (its next command revives it from the log); the journal
// and expiry actors are restarted and the failure is logged.
package supervisor
