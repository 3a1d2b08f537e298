package lazarus_test

// Black-box tests of README "Operate" and the defaults README "In a
// cluster" closes with, through the Runtime's Options.

import (
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lazarusrt/lazarus"
	"github.com/lazarusrt/lazarus/agent/scripted"
)

// TestDocsOptionDefaults: idle passivation after 5 minutes, human
// deadlines of 24 hours.
func TestDocsOptionDefaults(t *testing.T) {
	require.Equal(t, 5*time.Minute, lazarus.DefaultIdleTimeout)
	require.Equal(t, 24*time.Hour, lazarus.DefaultHumanTimeout)
}

// TestDocsRaiseGOMAXPROCS: Options.RaiseGOMAXPROCS with Dir raises
// GOMAXPROCS by one while the store is open, however many such stores are
// open, and the last one's Close gives the old value back; without it the
// library changes nothing; a GOMAXPROCS environment variable is never
// overridden.
func TestDocsRaiseGOMAXPROCS(t *testing.T) {
	t.Setenv("GOMAXPROCS", "") // unset below; restored after the test
	require.NoError(t, os.Unsetenv("GOMAXPROCS"))
	before := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(before)
	open := func(raise bool) *lazarus.Runtime {
		rt, err := lazarus.Open(lazarus.Options{Dir: t.TempDir(), RaiseGOMAXPROCS: raise, Model: scripted.New(scripted.Options{})})
		require.NoError(t, err)
		return rt
	}
	plain := open(false)
	require.Equal(t, before, runtime.GOMAXPROCS(0), "the library changes nothing on its own")
	one := open(true)
	require.Equal(t, before+1, runtime.GOMAXPROCS(0))
	two := open(true)
	require.Equal(t, before+1, runtime.GOMAXPROCS(0), "by one, however many stores ask")
	require.NoError(t, one.Close())
	require.Equal(t, before+1, runtime.GOMAXPROCS(0), "while a store that asked is open")
	require.NoError(t, two.Close())
	require.Equal(t, before, runtime.GOMAXPROCS(0), "the last Close gives the old value back")
	require.NoError(t, plain.Close())

	t.Setenv("GOMAXPROCS", strconv.Itoa(before))
	three := open(true)
	require.Equal(t, before, runtime.GOMAXPROCS(0), "a GOMAXPROCS environment variable is never overridden")
	require.NoError(t, three.Close())
	require.Equal(t, before, runtime.GOMAXPROCS(0))
}
