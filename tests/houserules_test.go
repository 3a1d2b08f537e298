package tests

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/lazarusrt/lazarus"

// goFile is one parsed Go file of the repository.
type goFile struct {
	path string // relative to the repository root, slash-separated
	file *ast.File
	fset *token.FileSet
	src  []byte
}

func repoFiles(t *testing.T) []goFile {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	var files []goFile
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".pb.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		files = append(files, goFile{path: filepath.ToSlash(rel), file: f, fset: fset, src: src})
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return files
}

func imports(f *ast.File) []string {
	var out []string
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		out = append(out, p)
	}
	return out
}

func dirOf(path string) string {
	if i := strings.LastIndex(path, "/"); i >= 0 {
		return path[:i]
	}
	return "."
}

// TestHouseRules checks the rules of STYLE that grep can check.
func TestHouseRules(t *testing.T) {
	files := repoFiles(t)

	t.Run("actors and supervisor never import a storage adapter or Pebble", func(t *testing.T) {
		for _, f := range files {
			dir := dirOf(f.path)
			if !strings.HasPrefix(dir, "actors") && !strings.HasPrefix(dir, "supervisor") && !strings.HasPrefix(dir, "snapshot") && !strings.HasPrefix(dir, "agent") || strings.HasSuffix(f.path, "_test.go") {
				continue
			}
			for _, p := range imports(f.file) {
				require.False(t, strings.Contains(p, "pebble") || strings.HasPrefix(p, module+"/journal/"),
					"%s imports %s", f.path, p)
			}
		}
	})

	// ARCHITECTURE.md, invariant 10: only the facade (for its defaults),
	// cmd/ and tests/ wire a storage adapter in; journaltest runs memjournal
	// as the oracle of its model test.
	t.Run("only the facade, commands and tests import a storage adapter", func(t *testing.T) {
		adapters := []string{module + "/journal/memjournal", module + "/journal/pebblejournal", module + "/journal/pgjournal"}
		for _, f := range files {
			dir := dirOf(f.path)
			if dir == "." || dir == "journal/journaltest" || strings.HasPrefix(dir, "cmd/") || dir == "tests" || strings.HasPrefix(dir, "tests/") ||
				strings.HasSuffix(f.path, "_test.go") {
				continue
			}
			for _, p := range imports(f.file) {
				for _, a := range adapters {
					if strings.HasPrefix(module+"/"+dir+"/", a+"/") {
						continue // an adapter and its own helpers
					}
					require.False(t, p == a || strings.HasPrefix(p, a+"/"), "%s imports %s", f.path, p)
				}
			}
		}
	})

	// ARCHITECTURE.md's Codemap: messages imports nothing of ours. Its
	// generated files count (repoFiles skips them), and so does its own
	// package's tests; an external test package may import messages alone.
	t.Run("messages imports nothing of ours", func(t *testing.T) {
		root, err := filepath.Abs("..")
		require.NoError(t, err)
		checked := 0
		err = filepath.WalkDir(filepath.Join(root, "messages"), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			checked++
			for _, p := range imports(f) {
				if p != module && !strings.HasPrefix(p, module+"/") {
					continue
				}
				if strings.HasSuffix(f.Name.Name, "_test") && p == module+"/messages" {
					continue // an external test package imports the package it tests
				}
				t.Errorf("%s imports %s; messages imports nothing of this module", filepath.ToSlash(rel), p)
			}
			return nil
		})
		require.NoError(t, err)
		require.NotZero(t, checked, "messages has Go files")
	})

	t.Run("Pebble is imported only by its adapter, the facade, commands and tests", func(t *testing.T) {
		for _, f := range files {
			dir := dirOf(f.path)
			allowed := dir == "journal/pebblejournal" || dir == "." || strings.HasPrefix(dir, "cmd/") ||
				strings.HasPrefix(dir, "tests") || strings.HasSuffix(f.path, "_test.go")
			for _, p := range imports(f.file) {
				if strings.HasPrefix(p, "github.com/cockroachdb/pebble") {
					require.True(t, allowed, "%s imports %s", f.path, p)
				}
			}
		}
	})

	t.Run("library code does not print", func(t *testing.T) {
		for _, f := range files {
			if f.file.Name.Name == "main" || strings.HasSuffix(f.path, "_test.go") {
				continue
			}
			for _, p := range imports(f.file) {
				require.NotEqual(t, "log", p, "%s imports log; library code logs with log/slog", f.path)
			}
			ast.Inspect(f.file, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok || !strings.HasPrefix(sel.Sel.Name, "Print") {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "fmt" {
					t.Errorf("%s:%d: fmt.%s in library code; log with log/slog", f.path, f.fset.Position(sel.Pos()).Line, sel.Sel.Name)
				}
				return true
			})
		}
	})

	t.Run("tests do not sleep", func(t *testing.T) {
		for _, f := range files {
			if !strings.HasSuffix(f.path, "_test.go") {
				continue
			}
			lines := strings.Split(string(f.src), "\n")
			ast.Inspect(f.file, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "Sleep" {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "time" {
					line := f.fset.Position(sel.Pos()).Line
					// A deliberate delay that is not synchronisation (the
					// moment a crash harness kills its child) says so.
					if !strings.Contains(lines[line-1], "lint:allow-sleep") {
						t.Errorf("%s:%d: time.Sleep in a test; synchronise on a channel, a clock or require.Eventually", f.path, line)
					}
				}
				return true
			})
		}
	})

	// ScheduleSpec.TimeZone: a schedule's zone is loaded at each occurrence,
	// so each command embeds the zone database (time/tzdata) and never
	// depends on the host's zoneinfo; the library leaves that choice (about
	// 450 KB) to its user's main package, as Go's practice is.
	t.Run("the commands embed time/tzdata, the library does not", func(t *testing.T) {
		embeds := map[string]bool{"cmd/lazarus": false, "cmd/lazarus-node": false, "cmd/demo": false}
		for _, f := range files {
			dir := dirOf(f.path)
			test := strings.HasSuffix(f.path, "_test.go")
			for _, p := range imports(f.file) {
				if p != "time/tzdata" {
					continue
				}
				if _, ok := embeds[dir]; ok && !test {
					embeds[dir] = true
					continue
				}
				require.True(t, test || strings.HasPrefix(dir, "cmd/"), "%s imports time/tzdata: leave it to the main package", f.path)
			}
		}
		for dir, ok := range embeds {
			require.True(t, ok, "no file of %s imports time/tzdata", dir)
		}
	})

	t.Run("every package has a doc comment", func(t *testing.T) {
		documented := map[string]bool{}
		for _, f := range files {
			dir := dirOf(f.path)
			if _, ok := documented[dir]; !ok {
				documented[dir] = false
			}
			if f.file.Doc != nil && strings.TrimSpace(f.file.Doc.Text()) != "" && !strings.HasSuffix(f.path, "_test.go") {
				documented[dir] = true
			}
		}
		// A package of tests only has its doc comment in a doc.go too:
		// go doc and go list read no _test.go file.
		for dir, ok := range documented {
			require.True(t, ok, "package in %s has no doc comment outside its _test.go files", dir)
		}
	})
}
