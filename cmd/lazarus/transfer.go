package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/lazarusrt/lazarus/journal"
	"github.com/lazarusrt/lazarus/messages"
)

// formatHelp is the export format, as the export and import commands
// print it (format.go has the full rules).
const formatHelp = `
Format (lazarus-export, version 1): JSON lines, one record per line, each
with a "type" tag. The first line is the header; then, per conversation, its
row, metadata, events (ascending seq), summaries, tool call rows and
deadlines:

  {"type":"header","format":"lazarus-export","version":1}
  {"type":"conversation","conversation":ID,"record":<Conversation>}
  {"type":"metadata","conversation":ID,"record":{"key":K,"value":V}}
  {"type":"event","conversation":ID,"record":<Event>}
  {"type":"summary","conversation":ID,"record":<Summary>}
  {"type":"tool_call","conversation":ID,"record":<ToolCallRecord>}
  {"type":"deadline","conversation":ID,"record":<Deadline>}

A <Record> is the protojson form of that message of
messages/lazarus/v1/records.proto (field names as in the .proto, 64-bit
integers as strings, timestamps RFC 3339, enums by name). Audit rows are
not exported. Exports can be concatenated.`

var exportCmd = &command{
	name:     "export",
	synopsis: "(ID... | --all) [--file PATH]",
	summary:  "write conversations as JSON lines (the import format)",
	help: `
Writes the named conversations (or all, with --all) to stdout, or to
--file PATH (written to a temporary file and renamed into place, so PATH
is never left half-written). Two exports of the same data are equal byte
for byte.
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
	// Read everything before writing anything: an unknown id fails the
	// export without output.
	secs := make(map[string]*section, len(ids))
	for _, id := range ids {
		s, err := collect(ctx, st, id)
		if err != nil {
			return err
		}
		secs[id] = s
	}
	if err := collectDeadlines(ctx, st, secs); err != nil {
		return err
	}
	write := func(w io.Writer) error {
		bw := bufio.NewWriter(w)
		e, err := newExporter(bw)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if err := e.section(secs[id]); err != nil {
				return err
			}
		}
		return bw.Flush()
	}
	if *file == "" {
		return write(c.stdout)
	}
	return writeFileAtomic(*file, write)
}

// writeFileAtomic writes path through a temporary file in the same
// directory, synced and renamed into place.
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
	return os.Rename(f.Name(), path)
}

var importCmd = &command{
	name:     "import",
	synopsis: "[--file PATH] [--dry-run]",
	summary:  "read an export (stdin or --file) into the directory; never overwrites",
	help: `
Reads an export from stdin (or --file PATH) into the directory, creating
the directory (and the store) if it does not exist or is empty.

All or nothing on bad input: the whole input is read and validated before
anything is written (every line, every record against the Store's rules
and limits, seqs 1..n, tool call ids unique), and then checked against the
target: if a conversation already exists there, was deleted there (a
deleted id can never be written again) or uses a tool call id the target
has, nothing is imported. The logs of every conversation go in one atomic
write through the Store's append, which re-checks every seq; settings,
metadata and summaries follow. --dry-run stops after the checks.

Everything comes back as exported except the conversation row's times: the
Store sets "updated" to now and "created" to the time of the first event.
An active conversation resumes when a runtime next opens the directory.
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
	secs, err := readExport(in)
	if err != nil {
		return fmt.Errorf("input rejected, nothing imported: %w", err)
	}
	st, _, err := c.openStore(fs, !*dryRun)
	if *dryRun && errors.Is(err, errNoStore) {
		// A new directory: nothing in it to conflict with.
		for _, s := range secs {
			fmt.Fprintf(c.stdout, "would import %s\n", describe(s))
		}
		return nil
	}
	if err != nil {
		return err
	}
	defer closeStore(st, &err)
	if *dryRun {
		if err := preflight(ctx, st, secs); err != nil {
			return fmt.Errorf("nothing would be imported: %w", err)
		}
		for _, s := range secs {
			fmt.Fprintf(c.stdout, "would import %s\n", describe(s))
		}
		return nil
	}
	rep, err := importSections(ctx, st, secs)
	if err != nil {
		return err
	}
	for _, s := range secs {
		fmt.Fprintf(c.stdout, "imported %s\n", describe(s))
	}
	for _, id := range rep.createdChanged {
		fmt.Fprintf(c.stderr, "note: conversation %s: the Store set its created time to its first event's\n", displayID(id))
	}
	return nil
}

func describe(s *section) string {
	return fmt.Sprintf("conversation %s (%s, %d events, %d summaries, %d tool calls, %d deadlines, %d metadata keys)",
		displayID(s.id()), statusName(s.row.GetStatus()), len(s.events), len(s.summaries), len(s.toolCalls), len(s.deadlines), len(s.metadata))
}
