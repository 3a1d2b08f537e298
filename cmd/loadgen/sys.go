package main

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/trace"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// cpuTime is the CPU time (user + system) the process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procStatus returns a field of /proc/self/status in bytes (VmHWM, VmRSS),
// or 0 where it cannot be read (not Linux).
func procStatus(field string) uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}

// peakRSS is the process's peak resident set size (VmHWM) since it started
// or since the last resetPeakRSS.
func peakRSS() uint64 { return procStatus("VmHWM") }

// resetPeakRSS resets VmHWM to the current RSS (Linux: "5" to clear_refs),
// so that each phase reports its own peak. It reports whether it could.
func resetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// dirSize is the total size of the regular files under dir.
func dirSize(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			total += info.Size()
		}
		return nil
	})
	return total
}

// traceWindow writes an execution trace to path from after to after+span;
// the returned function stops it early (at the end of the phase).
func traceWindow(path string, after, span time.Duration) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	var once sync.Once
	finish := func() {
		once.Do(func() {
			close(done)
		})
	}
	go func() {
		select {
		case <-time.After(after):
		case <-done:
			f.Close()
			return
		}
		if err := trace.Start(f); err != nil {
			f.Close()
			return
		}
		select {
		case <-time.After(span):
		case <-done:
		}
		trace.Stop()
		f.Close()
	}()
	return finish, nil
}
