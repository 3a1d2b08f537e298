package cliflag

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAsksHelp(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"-h"}, true},
		{[]string{"--help"}, true},
		{[]string{"-help"}, true},
		{[]string{"--h"}, true},
		{[]string{"--help=true"}, true},
		{[]string{"--dir", "--help"}, true},
		{[]string{"--dir", "x", "-h"}, true},
		{[]string{"--dir=-h"}, false},
		{[]string{"--", "-h"}, false},
		{[]string{"h", "help"}, false},
		{[]string{"--helper", "-hh"}, false},
	} {
		require.Equal(t, c.want, AsksHelp(c.args), "%q", c.args)
	}
}
