package pgjournal

import (
	"errors"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/journal/pgjournal/pgtest"
	"github.com/lazarusrt/lazarus/messages"
	"github.com/stretchr/testify/require"
)

// TestTwoNodesAppendOneConversation: two Stores on one database (two
// nodes) append to one conversation at once, each append fenced on the
// last seq its writer read: every append either succeeds with the seqs
// after its fence or fails with ErrConflict, and the log holds exactly the
// acknowledged events, each once, at the seq it was acknowledged with.
func TestTwoNodesAppendOneConversation(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	nodes := []*Store{open(t, dsn, Options{}), open(t, dsn, Options{})}
	ctx := t.Context()
	const writersPerNode, appendsPerWriter = 3, 15
	var mu sync.Mutex
	acked := map[uint64]string{}
	var wg sync.WaitGroup
	errs := make(chan error, len(nodes)*writersPerNode)
	for n, s := range nodes {
		for w := range writersPerNode {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for done, try := 0, 0; done < appendsPerWriter; try++ {
					last, err := s.LastSeq(ctx, "c")
					if err != nil {
						errs <- err
						return
					}
					text := fmt.Sprintf("n%d w%d #%d", n, w, try)
					res, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: last,
						Events: []*messages.Event{userEvent(text)}})
					if err != nil {
						if !errors.Is(err, journal.ErrConflict) {
							errs <- err
							return
						}
						continue
					}
					if res.FirstSeq != last+1 || res.LastSeq != last+1 {
						errs <- fmt.Errorf("append after %d got seqs %d-%d", last, res.FirstSeq, res.LastSeq)
						return
					}
					mu.Lock()
					if prev, ok := acked[res.LastSeq]; ok {
						mu.Unlock()
						errs <- fmt.Errorf("seq %d acknowledged twice: %q and %q", res.LastSeq, prev, text)
						return
					}
					acked[res.LastSeq] = text
					mu.Unlock()
					done++
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	evs, err := nodes[0].Events(ctx, "c", journal.EventQuery{})
	require.NoError(t, err)
	require.Len(t, evs, len(nodes)*writersPerNode*appendsPerWriter)
	for i, ev := range evs {
		require.EqualValues(t, i+1, ev.GetSeq())
		require.Equal(t, acked[ev.GetSeq()], textOf(ev), "seq %d", ev.GetSeq())
	}
	last, err := nodes[1].LastSeq(ctx, "c")
	require.NoError(t, err)
	require.EqualValues(t, len(evs), last)
}

// TestConnectionLostMidRead: the connection drops in the middle of the
// rows of a read (Events, LoadSince): the read fails with ErrUnavailable,
// never returns the rows before the cut as the log; the next read, on a
// new connection, gets the whole log.
func TestConnectionLostMidRead(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	ctx := t.Context()
	const n = 300
	for _, read := range []struct {
		name string
		run  func(s *Store) ([]*messages.Event, error)
	}{
		{"Events", func(s *Store) ([]*messages.Event, error) { return s.Events(ctx, "c", journal.EventQuery{}) }},
		{"LoadSince", func(s *Store) ([]*messages.Event, error) {
			_, evs, err := s.LoadSince(ctx, "c")
			return evs, err
		}},
	} {
		t.Run(read.name, func(t *testing.T) {
			proxy := newCommitDropper(t, u.Host)
			pu := *u
			pu.Host = proxy.l.Addr().String()
			s := open(t, pu.String(), Options{})
			if last, err := s.LastSeq(ctx, "c"); err == nil && last == 0 {
				for i := range n {
					_, err := s.Append(ctx, &messages.AppendRequest{ConversationId: "c", ExpectedLast: uint64(i),
						Events: []*messages.Event{userEvent(fmt.Sprintf("event %04d", i+1))}})
					require.NoError(t, err)
				}
			}
			proxy.raw = []byte("event 0200")
			proxy.armed.Store(true)
			evs, err := read.run(s)
			<-proxy.dropped
			require.ErrorIs(t, err, journal.ErrUnavailable)
			require.Nil(t, evs)

			evs, err = read.run(s)
			require.NoError(t, err, "the pool reconnects")
			require.Len(t, evs, n)
		})
	}
}

// TestOpenBoundedWhenTheServerStopsAnsweringAtItsUnlock: Options.Timeout
// bounds Open: a server that stops answering once Open has read the
// schema version, when Open releases its migration lock, fails nothing
// (the schema is there) and does not hang Open. The unlock ran under a
// context without a deadline, and Open waited for its reply for good.
func TestOpenBoundedWhenTheServerStopsAnsweringAtItsUnlock(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	require.NoError(t, open(t, dsn, Options{}).Close())
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	proxy := newCommitDropper(t, u.Host)
	u.Host = proxy.l.Addr().String()
	// The row of the schema version (binary int4).
	proxy.raw, proxy.hold = []byte{'D', 0, 0, 0, 14, 0, 1, 0, 0, 0, 4, 0, 0, 0, byte(SchemaVersion())}, true
	proxy.armed.Store(true)

	done := make(chan error, 1)
	go func() {
		s, err := Open(t.Context(), u.String(), Options{Timeout: silentTimeout})
		if err == nil {
			_ = s.Close()
		}
		done <- err
	}()
	<-proxy.dropped
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Open still waits for the unlock's reply, past Options.Timeout")
	}
}
