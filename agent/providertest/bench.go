package providertest

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"
)

// ServeStream starts a loopback server that answers every request with
// body as a 200 text/event-stream (written whole, as Write does); it is
// closed when b ends. Requests are not recorded.
func ServeStream(b testing.TB, body []byte) *httptest.Server {
	r := Response{Status: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: body}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { Write(w, r) }))
	b.Cleanup(srv.Close)
	return srv
}

// Compare measures a provider against the raw SDK on the same transcript:
// each of b.N ops runs one turn through ours and one through raw (which of
// the two goes first alternates), each consuming a stream of deltas text
// deltas, and times each alone. It counts each one's heap allocations from
// runtime.MemStats taken around it (the loopback server's, the same for
// both, included). It reports, for each side (ours-, raw-): ns/delta (the
// turn's time over deltas), us/turn, allocs/turn and B/turn; and the ratios
// ours/raw of the time and of the allocations. The ratios are the figures
// to compare across runs: both sides ran in the same process, interleaved,
// under the same load. ns/op counts both turns and the MemStats reads.
func Compare(b *testing.B, deltas int, ours, raw func() error) {
	var (
		t     [2]time.Duration
		n, by [2]uint64
		ms    runtime.MemStats
	)
	run := func(k int, f func() error) {
		runtime.ReadMemStats(&ms)
		m0, b0 := ms.Mallocs, ms.TotalAlloc
		t0 := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		t[k] += time.Since(t0)
		runtime.ReadMemStats(&ms)
		n[k] += ms.Mallocs - m0
		by[k] += ms.TotalAlloc - b0
	}
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			run(0, ours)
			run(1, raw)
		} else {
			run(1, raw)
			run(0, ours)
		}
	}
	ops := float64(b.N)
	for k, side := range []string{"ours", "raw"} {
		b.ReportMetric(float64(t[k].Nanoseconds())/ops/float64(deltas), side+"-ns/delta")
		b.ReportMetric(float64(t[k].Microseconds())/ops, side+"-us/turn")
		b.ReportMetric(float64(n[k])/ops, side+"-allocs/turn")
		b.ReportMetric(float64(by[k])/ops, side+"-B/turn")
	}
	b.ReportMetric(float64(t[0])/float64(t[1]), "time-ours/raw")
	b.ReportMetric(float64(n[0])/float64(n[1]), "allocs-ours/raw")
}
