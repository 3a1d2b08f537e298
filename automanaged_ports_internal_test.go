package lazarus

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// OpenAutoManagedMembers opens n cluster members on the automanaged
// provider, for tests: member i gets AutoManagedPort ports[i] and every
// member gets all the ports as Seeds; open opens member i with them. A
// port free when chosen can be taken by another process before the
// member's health server binds it, which fails only in a log line (Open
// succeeds), so each member's health endpoint is asked until it answers
// as that member. If one does not, every member of the attempt is closed
// and all are opened again on new ports, a bounded number of times. open
// must make anything Close releases (an actor system) afresh each call.
// The caller closes the members returned.
func OpenAutoManagedMembers(t testing.TB, n int, open func(i, port int, seeds []string) (*Runtime, error)) []*Runtime {
	t.Helper()
	rts, err := openAutoManaged(autoManagedAttempts, n, freeTCPPort, open)
	require.NoError(t, err)
	return rts
}

// autoManagedAttempts bounds the attempts of OpenAutoManagedMembers.
const autoManagedAttempts = 5

// openAutoManaged is OpenAutoManagedMembers with the ports chosen by pick
// and at most attempts attempts.
func openAutoManaged(attempts, n int, pick func() (int, error), open func(i, port int, seeds []string) (*Runtime, error)) ([]*Runtime, error) {
	var lastErr error
	for range attempts {
		rts, err := openAutoManagedOnce(n, pick, open)
		if err == nil {
			return rts, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("%d attempts: %w", attempts, lastErr)
}

func openAutoManagedOnce(n int, pick func() (int, error), open func(i, port int, seeds []string) (*Runtime, error)) (_ []*Runtime, err error) {
	ports := make([]int, n)
	seeds := make([]string, n)
	for i := range ports {
		if ports[i], err = pick(); err != nil {
			return nil, err
		}
		seeds[i] = "127.0.0.1:" + strconv.Itoa(ports[i])
	}
	var rts []*Runtime
	defer func() {
		if err != nil {
			for _, rt := range rts {
				_ = rt.Close()
			}
		}
	}()
	for i, port := range ports {
		rt, err := open(i, port, seeds)
		if err != nil {
			return nil, err
		}
		rts = append(rts, rt)
	}
	for i, rt := range rts {
		if err := awaitHealth(ports[i], rt.Address()); err != nil {
			return nil, err
		}
	}
	return rts, nil
}

// awaitHealth waits until the automanaged health endpoint on port answers
// as the member at addr. It fails at once on an answer from anything else
// (the port was taken), and after a bound on no answer at all.
func awaitHealth(port int, addr string) error {
	client := &http.Client{Timeout: time.Second}
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/_health"
	deadline := time.Now().Add(10 * time.Second)
	// Polled, as require.Eventually does: the server starts
	// asynchronously, and nothing signals it.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := client.Get(url)
		if err == nil {
			var node struct {
				Address string `json:"address"`
				Port    int    `json:"port"`
			}
			derr := json.NewDecoder(resp.Body).Decode(&node)
			_ = resp.Body.Close()
			got := net.JoinHostPort(node.Address, strconv.Itoa(node.Port))
			if resp.StatusCode == http.StatusOK && derr == nil && got == addr {
				return nil
			}
			return fmt.Errorf("port %d answers as something other than %s (status %d, %q, %v)", port, addr, resp.StatusCode, got, derr)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("port %d: no health answer for %s: %w", port, addr, err)
		}
		<-tick.C
	}
}

// freeTCPPort is a TCP port free on every interface when it returns.
func freeTCPPort() (int, error) {
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// TestOpenAutoManagedRetriesATakenPort: a member whose automanaged port
// another server holds (it was taken between the choice and the bind) is
// closed and opens again on another port, where it forms. (One member:
// two in one process race in grpc's logger under the race detector.)
func TestOpenAutoManagedRetriesATakenPort(t *testing.T) {
	held, err := net.Listen("tcp", ":0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(held) }()
	t.Cleanup(func() {
		require.NoError(t, srv.Close())
		require.ErrorIs(t, <-served, http.ErrServerClosed)
	})
	heldPort := held.Addr().(*net.TCPAddr).Port

	picks := 0
	pick := func() (int, error) {
		picks++
		if picks == 1 {
			return heldPort, nil
		}
		return freeTCPPort()
	}
	var attempts [][]int
	var opened []*Runtime
	open := func(i, port int, seeds []string) (*Runtime, error) {
		if i == 0 {
			attempts = append(attempts, nil)
		}
		attempts[len(attempts)-1] = append(attempts[len(attempts)-1], port)
		require.Equal(t, []string{"127.0.0.1:" + strconv.Itoa(port)}, seeds)
		rt, err := Open(Options{Model: okModel(), IdleTimeout: -1, Logger: slog.New(slog.DiscardHandler),
			Cluster: &ClusterOptions{AutoManagedPort: port, Seeds: seeds}})
		if err == nil {
			opened = append(opened, rt)
		}
		return rt, err
	}
	rts, err := openAutoManaged(autoManagedAttempts, 1, pick, open)
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, rt := range rts {
			_ = rt.Close()
		}
	})
	require.Len(t, attempts, 2, "one attempt on the held port, one after it")
	require.Equal(t, [][]int{{heldPort}, {attempts[1][0]}}, attempts)
	require.NotEqual(t, heldPort, attempts[1][0])
	require.Len(t, opened, 2)
	require.Same(t, opened[1], rts[0])
	opened[0].mu.Lock()
	closed := opened[0].closed
	opened[0].mu.Unlock()
	require.True(t, closed, "the failed attempt's member was closed")
	require.Eventually(t, func() bool { return slices.Equal(rts[0].Members(), []string{rts[0].Address()}) }, 20*time.Second, 10*time.Millisecond,
		"%s sees itself: %v", rts[0].Address(), rts[0].Members())
}

// TestOpenAutoManagedGivesUp: when every port chosen is taken, it fails
// after a bounded number of attempts with the last attempt's reason.
func TestOpenAutoManagedGivesUp(t *testing.T) {
	held, err := net.Listen("tcp", ":0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(held) }()
	t.Cleanup(func() {
		require.NoError(t, srv.Close())
		require.ErrorIs(t, <-served, http.ErrServerClosed)
	})
	heldPort := held.Addr().(*net.TCPAddr).Port
	opens := 0
	_, err = openAutoManaged(2, 1, func() (int, error) { return heldPort, nil }, func(_, port int, seeds []string) (*Runtime, error) {
		opens++
		return Open(Options{Model: okModel(), IdleTimeout: -1, Logger: slog.New(slog.DiscardHandler),
			Cluster: &ClusterOptions{AutoManagedPort: port, Seeds: seeds}})
	})
	require.ErrorContains(t, err, "answers as something other than")
	require.Equal(t, 2, opens)
}
