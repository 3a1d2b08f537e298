// Package crash holds the reliability tests of Lazarus: the tests that try
// hardest to break the promises written down in RELIABILITY.md at the root
// of the repository. It has no code of its own; everything is in its
// _test.go files:
//
//   - TestKill9: a kill -9 harness. The test binary re-executes itself as a
//     child process (TestCrashChild) that runs a Runtime on a Pebble
//     directory with a workload of many conversations (server tools that
//     record every run in a side file, human tools answered, rejected,
//     double-clicked or left to expire, summaries, passivation). The child
//     reports every acknowledged write on stdout; the parent kills it with
//     SIGKILL at seeded random moments, restarts it on the same directory,
//     and after every cycle opens the store itself and checks the
//     invariants (verify_test.go). LAZARUS_CRASH_CYCLES (or -long) sets the
//     number of cycles; LAZARUS_CRASH_SEED replays a run.
//   - TestIOFault*: write, sync and disk-full errors injected under a
//     running Runtime with Pebble's errorfs.
//   - TestTorture*: races between an expiry and a late answer, between two
//     clicks, and between many activations of one conversation.
//   - Fuzz*: the Runtime's public inputs.
//   - TestSecondProcess*: two processes opening one directory.
//   - TestThreat*: the threat model of stored data.
package crash
