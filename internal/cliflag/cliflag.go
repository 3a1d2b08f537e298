// Package cliflag holds what the project's commands share in reading their
// command lines.
package cliflag

import "strings"

// AsksHelp reports whether args, up to a "--", hold a help flag as the
// flag package reads one: -h, -help, --h or --help, with or without a
// value. A command checks it before the flag package reads args, which
// would take a help flag after a flag expecting a value as that value
// (--dir --help would be --dir "--help"); a value that looks like a help
// flag is given with "=" (--dir=-h).
func AsksHelp(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		if strings.HasPrefix(a, "-") && (name == "h" || name == "help") {
			return true
		}
	}
	return false
}
