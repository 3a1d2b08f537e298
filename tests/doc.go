// Package tests holds the cross-package scenarios of Lazarus, run through
// the public API, most on every adapter (memjournal, pebblejournal, and
// pgjournal on a throwaway PostgreSQL started by pgtest): recovery after
// kills and restarts, deadlines, passivation, rewinds, forks, files,
// schedules and named agents; black-box tests written from the README,
// the package documentation and RELIABILITY.md; and the house rules that
// a parse of the source can check (TestHouseRules).
//
// The package has no library code; everything is in its _test.go files.
package tests
