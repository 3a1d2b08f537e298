package leakcheck

import (
	"strings"
	"testing"
)

//go:noinline
func parkedHere(release <-chan struct{}, parked chan<- struct{}) {
	close(parked)
	<-release
}

// TestStacks: Stacks holds a stack for the caller and for a goroutine
// blocked elsewhere, each naming its functions and starting with its
// "goroutine N" line.
func TestStacks(t *testing.T) {
	release, parked := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		parkedHere(release, parked)
	}()
	defer func() { close(release); <-done }()
	<-parked
	var self, other bool
	for _, s := range Stacks() {
		if !strings.HasPrefix(s, "goroutine ") {
			t.Errorf("a stack without its goroutine line: %q", s)
		}
		self = self || strings.Contains(s, "leakcheck.TestStacks(")
		other = other || strings.Contains(s, "leakcheck.parkedHere(")
	}
	if !self || !other {
		t.Fatalf("the caller's stack found: %v; the parked goroutine's: %v", self, other)
	}
}
