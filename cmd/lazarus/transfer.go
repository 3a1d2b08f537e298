package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// formatHelp is the export format, as the export and import commands
// print it (format.go has the full rules).
const formatHelp = `
Format (lazarus-export, version 5): JSON lines, one record per line, each
with a "type" tag and ended by a newline. The first line is the header;
then, per conversation, its row, metadata, events (ascending seq, each
tool_call event directly followed by the row of its call; a fork's start
after the summary it copied, whose line comes right before them, and its
copied tool_call events have no row), summaries,
deadlines, pending schedules (by schedule id), and an end line counting
them; a trailer counting the sections and lines closes the file, so a cut
anywhere is detected:

  {"type":"header","format":"lazarus-export","version":5}
  {"type":"conversation","conversation":ID,"record":<Conversation>}
  {"type":"metadata","conversation":ID,"record":{"key":K,"value":V}}
  {"type":"event","conversation":ID,"record":<Event>}
  {"type":"tool_call","conversation":ID,"record":<ToolCallRecord>}
  {"type":"summary","conversation":ID,"record":<Summary>}
  {"type":"deadline","conversation":ID,"record":<Deadline>}
  {"type":"schedule","conversation":ID,"record":<Schedule>}
  {"type":"end","conversation":ID,"record":{"last_seq":N,"tool_calls":K,"summaries":S,"deadlines":D,"schedules":W,"metadata":M}}
  {"type":"trailer","record":{"conversations":C,"lines":L}}

A <Record> is the protojson form of that message of
messages/lazarus/v1/records.proto (Schedule: schedule.proto; field names
as in the .proto, 64-bit integers as strings, timestamps RFC 3339, enums
by name). Exports can be concatenated. Version 4 exports (no schedule
revisions), version 3 exports (no forks either) and version 2 exports (no
schedule lines, no "schedules" count either) are still read. Version 1 exports (without
end lines) are refused: export the source again.

Not exported: audit rows (model calls), tombstones of deleted
conversations, and file checkpoints (the contents server tools' files had
before a call, and their blobs): after an import, a rewind with
RewindOptions.Files restores no file changed before the import.`

var exportCmd = &command{
	name:     "export",
	synopsis: "(ID... | --all) [--file PATH]",
	summary:  "write conversations as JSON lines (the import format)",
	help: `
Writes the named conversations (or all, with --all) to stdout, or to
--file PATH (written to a temporary file, synced, renamed into place and
its directory synced, so PATH is never left half-written; a PATH that exists must be a regular file,
not a directory, a device, a FIFO or a symlink, which the rename would
replace: usage error, status 2, before the store is opened; so is a PATH
inside the --dir store's directory). Two exports of the same data are equal byte
for byte. Export streams: it holds one page of events at a time, whatever
the length of a conversation. It checks each conversation as import will
(the log runs 1..last seq, every tool_call event has its row and every
pending row its event and no tool_result, fsm_state.last_seq is not past the last seq, every schedule
is valid and of its conversation, a fork's copied summary ends where no
tool call is open) and stops with
an error on a damaged one; what it wrote to stdout then lacks its end
line and trailer, so import refuses it. A conversation written while it
is exported (by a node on the same PostgreSQL database) is exported as it was at one moment:
its log up to the last seq read then, with the row, pending calls,
deadlines and schedules of that moment, so what is appended meanwhile
(an occurrence of a schedule too) is not in the export; one written
between each of 50 readings of its state fails the export
(journal.ErrConflict), and one deleted meanwhile fails it as one the
store does not have (exit status 5). A fork (Runtime.Fork) is
exported as it is: its row with its origin, the summary it copied, its
log from its first seq (its copied tool calls' rows are its source's, and
not in its section), its own rows, schedules and metadata. On a terminal,
stderr shows progress during a long run. A SIGTERM or SIGINT stops it
within a page of events, exit status 8: stdout then lacks the trailer,
and --file is not written; a second one exits at once, status 7 (a
--file's temporary file may then remain).
` + formatHelp,
	run: (*cli).export,
}

func (c *cli) export(ctx context.Context, fs *flags, args []string) (err error) {
	all := fs.Bool("all", false, "export every conversation")
	file := fs.String("file", "", "write to this `path` instead of stdout")
	ids, err := c.parse(fs, args, 0, -1)
	if err != nil {
		return err
	}
	if *all == (len(ids) > 0) {
		return usagef("name the conversations to export, or pass --all")
	}
	if *file != "" {
		if err := replaceableFile(*file); err != nil {
			return err
		}
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if err := journal.ValidateID("conversation id", id); err != nil {
			return usagef("%v", err)
		}
		if seen[id] {
			return usagef("conversation %s named twice", displayID(id))
		}
		seen[id] = true
	}
	if *file != "" {
		// Before the store is opened, as the other --file checks: the
		// directory the command would open (a PostgreSQL store has none).
		if dsn, _ := c.postgresDSN(fs); dsn == "" {
			if dir, err := c.storeDir(fs); err == nil && insideDir(*file, dir) {
				return &usageError{msg: fmt.Sprintf("--file %s is inside the store's directory %s: "+
					"the export would replace or add a file of the store", *file, dir), err: journal.ErrInvalid}
			}
		}
	}
	st, _, err := c.openStore(fs, false)
	if err != nil {
		return err
	}
	defer closeStore(st, &err)
	if *all {
		err := eachConversation(ctx, st, func(row *messages.Conversation) error {
			ids = append(ids, row.GetId())
			return nil
		})
		if err != nil {
			return err
		}
	}
	// Check every id before writing anything: an unknown id fails the
	// export without output.
	for _, id := range ids {
		if _, err := st.Conversation(ctx, id); err != nil {
			if errors.Is(err, journal.ErrDeleted) {
				return fmt.Errorf("no conversation %s: %w (%w)", displayID(id), journal.ErrNotFound, err)
			}
			if noConversation(err) {
				// err says ErrNotFound already: the sentinel's text once.
				return fmt.Errorf("no conversation %s: %w", displayID(id), err)
			}
			return err
		}
	}
	prog := c.newProgress("export")
	defer prog.done()
	write := func(w io.Writer) error { return exportTo(ctx, st, ids, w, prog) }
	if *file == "" {
		return write(c.stdout)
	}
	return writeFileAtomic(*file, write)
}

// replaceableFile checks that path, if it exists, is a regular file:
// writeFileAtomic renames over it, which would replace a symlink rather
// than write to its target (--file /dev/stdout), or a device or a FIFO.
// Its error is a usage error wrapping journal.ErrInvalid.
func replaceableFile(path string) error {
	info, err := os.Lstat(path)
	if err != nil || info.Mode().IsRegular() {
		return nil // a missing path is created; another error shows when it is
	}
	kind := "not a regular file"
	switch m := info.Mode(); {
	case m.IsDir():
		kind = "a directory"
	case m&fs.ModeSymlink != 0:
		kind = "a symlink (name its target)"
	case m&fs.ModeDevice != 0:
		kind = "a device"
	case m&fs.ModeNamedPipe != 0:
		kind = "a FIFO"
	}
	return &usageError{msg: fmt.Sprintf("--file %s is %s: export writes a new file and renames it into place, "+
		"which would replace it", path, kind), err: journal.ErrInvalid}
}

// insideDir reports whether path is dir or lies under it, after making
// both absolute and resolving the symlinks of the parts that exist.
func insideDir(path, dir string) bool {
	resolve := func(p string) string {
		p, err := filepath.Abs(p)
		if err != nil {
			return filepath.Clean(p)
		}
		// The longest existing prefix, its symlinks resolved, and the rest.
		rest := ""
		for q := p; ; q = filepath.Dir(q) {
			if r, err := filepath.EvalSymlinks(q); err == nil {
				return filepath.Join(r, rest)
			}
			if filepath.Dir(q) == q {
				return p
			}
			rest = filepath.Join(filepath.Base(q), rest)
		}
	}
	rel, err := filepath.Rel(resolve(dir), resolve(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// writeFileAtomic writes path through a temporary file in the same
// directory, synced and renamed into place; the directory is then synced,
// so that the rename survives a crash. If that sync fails, path is in
// place and complete, and the error says its rename may not be durable.
func writeFileAtomic(path string, write func(io.Writer) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if err := write(f); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("%s written, but its directory not synced (a crash may lose it): %w", path, err)
	}
	return nil
}

// syncDir syncs the directory dir, making durable the renames into it. A
// variable for tests.
var syncDir = func(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		_ = d.Close()
		return err
	}
	return d.Close()
}

var importCmd = &command{
	name:     "import",
	synopsis: "[--file PATH] [--dry-run]",
	summary:  "read an export (stdin or --file) into the directory; never overwrites",
	help: `
Reads an export from stdin (or --file PATH) into the directory, creating
the directory (and the store) if it does not exist or is empty.

All or nothing on bad input: import reads the input twice. The first
pass checks every line (every record against the Store's rules and
limits, seqs 1..n, every tool_call event followed by its row, no
tool_result event answering a call whose row is pending, each
section's end line and the file's trailer, so a truncated export is
refused) and the target (a conversation that exists there, was deleted
there or has metadata there without a row, or a tool call id the target
has, refuses the input; so does a
store that keeps no schedules, when the input holds some; schedule ids
are per conversation, so the target's never clash); it writes nothing. The second pass writes, checking that it reads the same bytes
(stdin is spooled for it to an unlinked temporary file in $TMPDIR, which
needs room for the input). Memory stays bounded whatever the length of a
conversation. A conversation is written in several appends, the first of
which creates it with status ENDED, then its summaries and schedules, and
gets its exported status last; if
a write fails part-way, the error names the conversation left incomplete
(ENDED: a runtime does not resume it); after a write of unknown outcome
(a lost connection), the one that write may have written. --dry-run stops after the first
pass. On a terminal, stderr shows progress during a long run. A SIGTERM
or SIGINT stops it at its next line, exit status 8: during the first pass
nothing is written; during the second the error names the conversations
imported completely and the one left incomplete, as for a failed write.
A second one exits at once, status 7, as a kill would (a conversation
may be left incomplete, ENDED, without being named).

Everything comes back as exported, the conversation row's "created"
included, except its "updated", which the Store sets to now, and a
status SUSPENDED whose fsm_state names pending a call whose row is
resolved (an answer not yet in the log), which comes back ACTIVE, as the
Store writes any such row, so that a runtime resumes the conversation and
records the answer.
A fork comes back as a fork (Store.Fork writes its origin, the summary it
copied and its first events, with status ENDED; then the rest, as for any
conversation), whether or not its source is in the input. A fork origin
(forked_from) in a version 2 or 3 export is refused.
An active conversation resumes when a runtime next opens the directory,
and its schedules and deadlines are armed then (an occurrence due while
the store was moved fires once, as after any restart; a node already
running on the target arms them only when it next reads the store's
timers: at its start, or a cluster membership change).
` + formatHelp,
	run: (*cli).importCmd,
}

func (c *cli) importCmd(ctx context.Context, fs *flags, args []string) (err error) {
	file := fs.String("file", "", "read this `path` instead of stdin")
	dryRun := fs.Bool("dry-run", false, "validate the input against the directory; write nothing")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	in := c.stdin
	if *file != "" {
		f, err := os.Open(*file)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	var st journal.Store
	defer func() {
		if st != nil {
			closeStore(st, &err)
		}
	}()
	open := func(create bool) (journal.Store, error) {
		s, _, err := c.openStore(fs, create)
		if err == nil {
			st = s
		}
		return s, err
	}
	verb := "imported "
	if *dryRun {
		verb = "would import "
	}
	return importStream(ctx, in, open, importOptions{
		dryRun:    *dryRun,
		onSection: func(desc string) { fmt.Fprintf(c.stdout, "%s%s\n", verb, desc) },
		onNoCreated: func(id string) {
			fmt.Fprintf(c.stderr, "note: conversation %s: its row has no created time; the Store set it (its first event's time, or the import's)\n", displayID(id))
		},
		prog: c.newProgress("import: checking"),
	})
}
