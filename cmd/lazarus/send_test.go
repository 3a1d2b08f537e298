package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSendTakesNoStore: send works on a live node only, so it has no
// --dir or --postgres (its help lists none) and refuses them, before the
// command or after it, as usage errors that say why; a $LAZARUS_DIR does
// not keep it from reading $LAZARUS_SERVER.
func TestSendTakesNoStore(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dir", "d", "send", "hi"}, "lazarus send: --dir and --postgres name a store, and send works on a live node only (--server)"},
		{[]string{"--postgres", "postgres://db.invalid/app", "send", "hi"}, "lazarus send: --dir and --postgres name a store, and send works on a live node only (--server)"},
		{[]string{"send", "--dir", "d", "hi"}, "lazarus send: flag provided but not defined: -dir"},
		{[]string{"send", "--postgres", "postgres://db.invalid/app", "hi"}, "lazarus send: flag provided but not defined: -postgres"},
	} {
		var out, errb lockedBuffer
		c := newCLI(strings.NewReader(""), &out, &errb)
		c.getenv = func(k string) string { return map[string]string{envServer: "http://127.0.0.1:1"}[k] }
		require.Equal(t, exitUsage, c.run(ctxT(t), tc.args), errb.String())
		require.Contains(t, errb.String(), tc.want)
		require.Empty(t, out.String())
	}
	// $LAZARUS_DIR is not for send: it goes to $LAZARUS_SERVER (here
	// nothing listens: a failure to connect, exit 1).
	var out, errb lockedBuffer
	c := newCLI(strings.NewReader(""), &out, &errb)
	env := map[string]string{envServer: "http://127.0.0.1:1", envDir: t.TempDir()}
	c.getenv = func(k string) string { return env[k] }
	require.Equal(t, exitError, c.run(ctxT(t), []string{"send", "hi"}), errb.String())
	require.Contains(t, errb.String(), "node http://127.0.0.1:1")
}
