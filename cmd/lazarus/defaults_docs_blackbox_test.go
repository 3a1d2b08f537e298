package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/server"
)

// TestDocsServeConfigDefaults: the defaults README.md's table of the
// configuration keys of 'lazarus serve', and 'lazarus serve --help', give
// for each key are the values serve applies when the key is absent.
func TestDocsServeConfigDefaults(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	rows := map[string]string{} // a key's row, from its first `key` on
	for _, line := range strings.Split(string(b), "\n") {
		if m := regexp.MustCompile("^\\| `([a-z_]+)`").FindStringSubmatch(line); m != nil {
			rows[m[1]] = line
		}
	}
	help := strings.Join(strings.Fields(serveCmd.help), " ")
	// The value each key takes when the file and the flags leave it out:
	// what serve reads into the node (duration's default, the node's
	// runtime's Options defaults).
	for _, c := range []struct {
		key, row string // row: the key whose row holds it ("" is key)
		anchor   string // in a shared row, where the key's part starts
		want     time.Duration
		inHelp   bool
	}{
		{key: "shutdown_timeout", row: "operator_role", anchor: "`shutdown_timeout` (", want: defaultShutdownTimeout},
		{key: "idle_timeout", want: defaultIdleTimeout, inHelp: true},
		{key: "read_timeout", want: defaultReadTimeout, inHelp: true},
		{key: "stream_write_timeout", want: server.DefaultStreamWriteTimeout, inHelp: true},
		{key: "tool_timeout", want: lazarus.DefaultToolTimeout, inHelp: true},
		{key: "model_timeout", want: lazarus.DefaultModelTimeout, inHelp: true},
		{key: "timeout", row: "mcp_servers", anchor: "`timeout` of one call", want: defaultMCPTimeout},
	} {
		row := c.row
		if row == "" {
			row = c.key
		}
		text, ok := rows[row]
		require.True(t, ok, "README has no row for %s", row)
		if c.anchor != "" { // the key's part of a shared row
			i := strings.Index(text, c.anchor)
			require.GreaterOrEqual(t, i, 0, "row %s has %q", c.row, c.anchor)
			text = text[i:]
		}
		m := regexp.MustCompile(`default ([0-9a-z.]+)`).FindStringSubmatch(text)
		require.NotNil(t, m, "README's %s says no default", c.key)
		d, err := time.ParseDuration(m[1])
		require.NoError(t, err, "README's default of %s", c.key)
		require.Equal(t, c.want, d, "README's default of %s", c.key)
		if c.inHelp {
			m := regexp.MustCompile(c.key + ` \(default ([0-9a-z.]+)`).FindStringSubmatch(help)
			require.NotNil(t, m, "serve --help says no default of %s", c.key)
			d, err := time.ParseDuration(m[1])
			require.NoError(t, err)
			require.Equal(t, c.want, d, "serve --help's default of %s", c.key)
		}
	}
	require.Contains(t, rows["max_subscriptions"], fmt.Sprintf("(default %d, `lazarus.DefaultMaxSubscriptions`", lazarus.DefaultMaxSubscriptions), "README's default max_subscriptions")
	require.Contains(t, help, fmt.Sprintf("max_subscriptions event streams open at once (default %d;", lazarus.DefaultMaxSubscriptions), "serve --help's default max_subscriptions")
	require.Contains(t, rows["listen"], "(default `"+defaultListen+"`", "README's default listen address")
	require.Contains(t, rows["tokens_file"], "(default `$"+envTokens+"`)", "README's default tokens variable")
}
