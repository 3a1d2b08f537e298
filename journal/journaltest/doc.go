// Package journaltest is the conformance suite of journal.Store, and the
// benchmarks every adapter shares.
//
// An adapter's test file runs the suite unchanged with a Factory that opens
// a fresh, empty store for each case:
//
//	func TestConformance(t *testing.T) {
//		journaltest.Run(t, openHarness, journaltest.Features{Durable: true, Audit: true})
//	}
//
//	func BenchmarkStore(b *testing.B) { journaltest.RunBenchmarks(b, openHarness) }
//
// Every case is its own subtest with its own store. The cases check the
// contract written on journal.Store method by method (seqs, fencing,
// atomicity of an append, resolutions, summaries, tool calls, deadlines,
// conversations, audit, deletion and tombstones, key isolation, bad input,
// Close); durable adapters also get the reopen and crash cases. A model test
// applies the same random operations to a fresh memjournal (the oracle) and
// to the adapter and requires identical results.
//
// # Seeds
//
// Randomized cases (crash, model) pick a new seed on every run and print it
// when they fail. Set JOURNALTEST_SEED to replay one, and JOURNALTEST_OPS to
// change the number of operations of the model test:
//
//	JOURNALTEST_SEED=12345 go test -run 'TestConformance/Model' ./journal/pebblejournal
//
// The suite never sleeps: concurrency cases start their goroutines behind a
// closed channel and wait for them.
package journaltest
