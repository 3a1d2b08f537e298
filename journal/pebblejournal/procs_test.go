package pebblejournal

import (
	"runtime"
	"strconv"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

func openProcs(t *testing.T, opts Options) *Store {
	t.Helper()
	opts.FS = vfs.NewMem()
	s, err := Open("db", opts)
	require.NoError(t, err)
	return s
}

func TestOpenStoresRaiseGOMAXPROCSByOne(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	a := openProcs(t, Options{RaiseGOMAXPROCS: true})
	require.Equal(t, before+1, runtime.GOMAXPROCS(0), "an open store adds one P")
	b := openProcs(t, Options{RaiseGOMAXPROCS: true})
	require.Equal(t, before+1, runtime.GOMAXPROCS(0), "a second store adds none")
	require.NoError(t, a.Close())
	require.NoError(t, a.Close(), "Close twice gives back nothing more")
	require.Equal(t, before+1, runtime.GOMAXPROCS(0), "one store is still open")
	require.NoError(t, b.Close())
	require.Equal(t, before, runtime.GOMAXPROCS(0), "the last Close gives the P back")
}

func TestGOMAXPROCSIsLeftByDefault(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	s := openProcs(t, Options{})
	require.Equal(t, before, runtime.GOMAXPROCS(0))
	require.NoError(t, s.Close())
	require.Equal(t, before, runtime.GOMAXPROCS(0))
}

func TestGOMAXPROCSFromTheEnvironmentStands(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Setenv("GOMAXPROCS", strconv.Itoa(before))
	s := openProcs(t, Options{RaiseGOMAXPROCS: true})
	require.Equal(t, before, runtime.GOMAXPROCS(0), "the operator's value is not raised")
	require.NoError(t, s.Close())
	require.Equal(t, before, runtime.GOMAXPROCS(0))
}

func TestGOMAXPROCSChangedWhileOpenStands(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })
	s := openProcs(t, Options{RaiseGOMAXPROCS: true})
	runtime.GOMAXPROCS(before + 3)
	require.NoError(t, s.Close())
	require.Equal(t, before+3, runtime.GOMAXPROCS(0), "the value someone else set is not undone")
}
