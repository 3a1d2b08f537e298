package lazarus_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent"
	"github.com/lazarusrt/lazarus/agent/scripted"
	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/memjournal"
)

// plainStore hides every method but journal.Store's: a third-party adapter
// that does not report its audit setting.
type plainStore struct{ journal.Store }

// TestOpenAuditMustAgreeWithStore: a Store given in Options decides whether
// audit rows are kept, so Options.Audit.Enabled must agree with what it
// reports; Open refuses a contradiction instead of ignoring one of them.
func TestOpenAuditMustAgreeWithStore(t *testing.T) {
	cases := []struct {
		name           string
		storeAudit     bool
		hide           bool // the Store does not implement journal.AuditReporter
		optsAudit      bool
		refused        bool
		wantModelCalls int
	}{
		{name: "both off", wantModelCalls: 0},
		{name: "both on", storeAudit: true, optsAudit: true, wantModelCalls: 1},
		{name: "options on, store off", optsAudit: true, refused: true},
		{name: "options off, store on", storeAudit: true, refused: true},
		{name: "a store that does not say: options on", storeAudit: true, hide: true, optsAudit: true, wantModelCalls: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			mem := memjournal.New(memjournal.Options{Audit: tc.storeAudit})
			defer mem.Close()
			var store journal.Store = mem
			if tc.hide {
				store = plainStore{mem}
			}
			model := scripted.New(scripted.Options{})
			rt, err := lazarus.Open(lazarus.Options{Store: store, Model: model, Audit: lazarus.AuditOptions{Enabled: tc.optsAudit}})
			if tc.refused {
				require.ErrorIs(t, err, journal.ErrInvalid)
				require.Nil(t, rt)
				_, err := mem.Conversation(ctx, "c")
				require.ErrorIs(t, err, journal.ErrNotFound, "the Store is left open and untouched")
				return
			}
			require.NoError(t, err)
			defer rt.Close()
			model.Push("c", scripted.Text("hello"))
			end, err := rt.SendAndWait(ctx, "c", "hi", agent.Scope{UserID: "u"})
			require.NoError(t, err)
			require.Equal(t, "hello", end.Text)
			calls, err := mem.ModelCalls(ctx, "c")
			require.NoError(t, err)
			require.Len(t, calls, tc.wantModelCalls)
		})
	}
}
