package pebblejournal

import (
	"encoding/binary"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lazarusrt/lazarus/messages"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// SingleDirEnv names a directory for BenchmarkSingle's stores (default: a
// temporary one). On tmpfs the sync costs little, so the figures are the
// CPU of each side's own work.
const SingleDirEnv = "LAZARUS_BENCH_SINGLE_DIR"

func singleDir(b *testing.B) string {
	if d := os.Getenv(SingleDirEnv); d != "" {
		dir, err := os.MkdirTemp(d, "single")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = os.RemoveAll(dir) })
		return dir
	}
	return b.TempDir()
}

// singleEvent is a ~1 KiB user message.
func singleEvent() *messages.Event {
	ev := userEvent(strings.Repeat("lorem ipsum ", 80))
	ev.Time = timestamppb.New(time.Now())
	return ev
}

// BenchmarkSingle compares one conversation's sequential synced Appends of
// one event with a naive synced Pebble Set of the same event (the load
// generator's --single phase), with Pebble options alike.
func BenchmarkSingle(b *testing.B) {
	b.Run("Append", func(b *testing.B) {
		s, err := Open(singleDir(b), Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		var last uint64
		b.ReportAllocs()
		b.ResetTimer()
		defer reportCPU(b)()
		for range b.N {
			req := &messages.AppendRequest{ConversationId: "single", ExpectedLast: last, Events: []*messages.Event{singleEvent()}}
			if last == 0 {
				req.Status = messages.ConversationStatus_CONVERSATION_STATUS_ACTIVE
			}
			res, err := s.Append(ctx, req)
			if err != nil {
				b.Fatal(err)
			}
			last = res.LastSeq
		}
	})
	b.Run("Set", func(b *testing.B) {
		opts := &pebble.Options{
			FormatMajorVersion:          FormatMajorVersion,
			CacheSize:                   DefaultCacheSize,
			MemTableSize:                DefaultMemTableSize,
			MemTableStopWritesThreshold: MemTableStopWritesThreshold,
			L0CompactionThreshold:       L0CompactionThreshold,
			L0StopWritesThreshold:       L0StopWritesThreshold,
			LBaseMaxBytes:               LBaseMaxBytes,
			Logger:                      pebbleLogger{&Store{log: slog.New(slog.DiscardHandler)}},
		}
		SetLevelOptions(opts)
		db, err := pebble.Open(singleDir(b), opts)
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		prefix := append(binary.AppendUvarint([]byte("j/"), 6), "single"...)
		var seq uint64
		b.ReportAllocs()
		b.ResetTimer()
		defer reportCPU(b)()
		for range b.N {
			ev := singleEvent()
			seq++
			ev.Seq = seq
			v, err := proto.Marshal(ev)
			if err != nil {
				b.Fatal(err)
			}
			k := binary.BigEndian.AppendUint64(append([]byte(nil), prefix...), seq)
			if err := db.Set(k, v, pebble.Sync); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// reportCPU reports the process's CPU time per op (user and system, every
// goroutine: Pebble's commit pipeline and background work included) when
// the returned func is called.
func reportCPU(b *testing.B) func() {
	cpu0 := cpuTime()
	return func() { b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op") }
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
