package journaltest

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus/journal"
)

// Features says which optional parts of the suite apply to an adapter.
type Features struct {
	// Durable adapters survive Close and reopen, and crashes: the suite
	// runs the reopen and crash cases, and its model test reopens and
	// crashes the store between operations.
	Durable bool
	// Audit says the adapter supports audit: the suite runs the audit-on
	// cases with Factory(t, true). The audit-off cases run with
	// Factory(t, false) whatever this says.
	Audit bool
}

// Harness is one fresh store under test.
type Harness struct {
	// Store is the store, empty.
	Store journal.Store
	// Reopen closes the store cleanly and opens it again on the same data
	// (Durable only). The suite uses only the returned store afterwards.
	// It may be called on a store the suite has already closed.
	Reopen func(t testing.TB) journal.Store
	// Crash simulates a crash (no Close; unsynced data may be lost or
	// partly kept) and opens a new store on what survived (Durable only).
	// The suite calls it only while no call to the store is in flight, and
	// uses only the returned store afterwards.
	Crash func(t testing.TB, rng *rand.Rand) journal.Store
}

// Factory opens a fresh, empty store for one case, with audit on or off.
// It registers the cleanup of whatever it opened (including the stores that
// Reopen and Crash open later) with t.Cleanup, and fails t if it cannot open.
type Factory func(t testing.TB, audit bool) *Harness

// Environment variables of the randomized cases.
const (
	// SeedEnv replays a randomized case: its value is the seed a failure
	// printed.
	SeedEnv = "JOURNALTEST_SEED"
	// OpsEnv sets the number of operations of the model test (default
	// 3000).
	OpsEnv = "JOURNALTEST_OPS"
)

// env is what a case receives: the factory and the features.
type env struct {
	f    Factory
	feat Features
}

// open returns a fresh harness with audit as the features say.
func (e env) open(t testing.TB) *Harness { return e.openAudit(t, e.feat.Audit) }

func (e env) openAudit(t testing.TB, audit bool) *Harness {
	t.Helper()
	h := e.f(t, audit)
	if h == nil || h.Store == nil {
		t.Fatalf("journaltest: the factory returned no store")
	}
	return h
}

type suiteCase struct {
	name string
	run  func(t *testing.T, e env)
	// durable and audit gate the case on the features.
	durable, audit bool
}

// Run runs the conformance suite: one subtest per case, each with a fresh
// store from f. Cases that need durability or audit run only when feat says
// the adapter has them.
func Run(t *testing.T, f Factory, feat Features) {
	e := env{f: f, feat: feat}
	groups := []struct {
		name  string
		cases []suiteCase
	}{
		{"Append", appendCases},
		{"AppendBatch", batchCases},
		{"Events", eventsCases},
		{"Summaries", summaryCases},
		{"ToolCalls", toolCallCases},
		{"Deadlines", deadlineCases},
		{"Reschedule", rescheduleCases},
		{"Schedules", scheduleCases},
		{"Conversations", conversationCases},
		{"ActiveIndex", activeCases},
		{"Fork", forkCases},
		{"Find", findCases},
		{"Audit", auditCases},
		{"Delete", deleteCases},
		{"Files", fileCases},
		{"KeyIsolation", isolationCases},
		{"BadInput", badInputCases},
		{"Ownership", ownershipCases},
		{"Close", closeCases},
		{"Durable", durableCases},
		{"Model", modelCases},
		{"Agents", agentCases},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, c := range g.cases {
				t.Run(c.name, func(t *testing.T) {
					if c.durable && !feat.Durable {
						t.Skip("journaltest: the adapter is not durable")
					}
					if c.audit && !feat.Audit {
						t.Skip("journaltest: the adapter has no audit")
					}
					c.run(t, e)
				})
			}
		})
	}
}

// seed returns the seed of a randomized case (SeedEnv, or a fresh one) and
// arranges for it to be printed if the case fails.
func seed(t testing.TB) uint64 {
	t.Helper()
	s := uint64(time.Now().UnixNano())
	if v := os.Getenv(SeedEnv); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("journaltest: %s=%q is not a uint64: %v", SeedEnv, v, err)
		}
		s = n
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("journaltest: seed %d; replay with %s=%d", s, SeedEnv, s)
		}
	})
	return s
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

// opsCount is the number of operations of the model test.
func opsCount(t testing.TB) int {
	t.Helper()
	v := os.Getenv(OpsEnv)
	if v == "" {
		return 3000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("journaltest: %s=%q is not a count", OpsEnv, v)
	}
	return n
}
