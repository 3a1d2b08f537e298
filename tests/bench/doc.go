// Package bench holds the runtime-level benchmarks of Lazarus: the journal
// actor's group commit against direct Store appends, end-to-end turns per
// second through the Runtime, revival latency (Kill, then Send) against a
// warm agent and against replaying the whole log, revival under the LLM
// summarizer and the token-budget policy (a 100,000-event conversation
// against a 100-event one, both written through the Runtime), the expiry
// actor with a million scheduled deadlines, and the memory of active and
// passivated conversation actors. Every benchmark runs on pebblejournal in
// a temporary directory on the real disk, so durable writes pay real
// fsyncs.
//
// The package has no library code; its benchmarks are in _test.go files.
// Setups are bounded so that
//
//	go test -run '^$' -bench . -benchtime=1x ./tests/bench/
//
// finishes in a few minutes (BenchmarkRevivalLLMSummary's fill, 20,000
// turns through the Runtime, takes one or two of them;
// LAZARUS_BENCH_LLM_TURNS shortens it); BENCHMARKS.md at the repository
// root gives the command that reproduces each published figure (usually
// with a larger -benchtime).
package bench
