package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// progress reports a long export or import on stderr, only when stderr is
// a terminal: nothing for the first progressAfter, then one line,
// rewritten in place, at most every progressEvery. A nil *progress
// reports nothing.
type progress struct {
	w     io.Writer
	now   func() time.Time
	what  string
	start time.Time
	next  time.Time
	shown bool
}

const (
	progressAfter = 2 * time.Second
	progressEvery = 500 * time.Millisecond
)

// newProgress returns a reporter of what on c's stderr, or nil when
// stderr is not a terminal (a file, a pipe, a test buffer), so scripts
// and logs never see it.
func (c *cli) newProgress(what string) *progress {
	if !c.isTerminal(c.stderr) {
		return nil
	}
	now := c.now()
	return &progress{w: c.stderr, now: c.now, what: what, start: now, next: now.Add(progressAfter)}
}

// update reports lines and bytes done, if it is time to.
func (p *progress) update(lines uint64, bytes int64) {
	if p == nil || lines%64 != 0 {
		return
	}
	now := p.now()
	if now.Before(p.next) {
		return
	}
	p.next = now.Add(progressEvery)
	p.shown = true
	fmt.Fprintf(p.w, "\r%s: %d lines, %.1f MiB, %s ", p.what, lines, float64(bytes)/(1<<20), now.Sub(p.start).Round(time.Second))
}

// phase names the next part of the run (the second pass of an import).
func (p *progress) phase(what string) {
	if p == nil {
		return
	}
	p.done()
	p.what = what
}

// done ends the progress line, if one was shown.
func (p *progress) done() {
	if p != nil && p.shown {
		fmt.Fprintln(p.w)
		p.shown = false
	}
}

// isTerminal reports whether w is a terminal: an *os.File on a character
// device. (/dev/null is one too; progress written there is harmlessly
// lost.)
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}
