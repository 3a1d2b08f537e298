package main

import (
	"bytes"
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// fullWriter refuses every write, as a stdout on a full disk does.
type fullWriter struct{}

func (fullWriter) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// A command whose stdout refuses what it prints fails (status 1, saying
// so): a script reading the output must not take a cut one for whole.
func TestFailedStdoutWriteFails(t *testing.T) {
	f := newFixture(t)
	for _, args := range [][]string{
		{"show", "waiting"},
		{"show", "waiting", "--json"},
		{"stats"},
		{"schedules", "finished"},
		{"conversations"},
		{"pending"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var errb bytes.Buffer
			c := newCLI(strings.NewReader(""), fullWriter{}, &errb)
			code := c.run(ctxT(t), append([]string{"--dir", f.dir}, args...))
			require.Equal(t, exitError, code, "stderr:\n%s", errb.String())
			require.Contains(t, errb.String(), "lazarus "+args[0]+": ")
			require.Contains(t, errb.String(), syscall.ENOSPC.Error())
		})
	}
}

// writeErr keeps the first error, and passes every write on.
func TestWriteErrKeepsTheFirstError(t *testing.T) {
	var b bytes.Buffer
	w := &writeErr{w: &b}
	_, err := w.Write([]byte("ok"))
	require.NoError(t, err)
	require.NoError(t, w.failed())
	w.w = fullWriter{}
	_, err = w.Write([]byte("x"))
	require.True(t, errors.Is(err, syscall.ENOSPC))
	require.True(t, errors.Is(w.failed(), syscall.ENOSPC))
	require.Equal(t, "ok", b.String())
}
