package migrations_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stocksvc/stocksvc/migrations"
)

// owners reads the table of docs/development.md's section "The tables' owners": for each table
// the migrations create, the packages that write it and those that only read it.
func owners(t *testing.T) (writers, readers map[string][]string) {
	t.Helper()
	doc, err := os.ReadFile("../docs/development.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "### The tables' owners")
	if !ok {
		t.Fatal(`docs/development.md has no section "The tables' owners"`)
	}
	packages := regexp.MustCompile("`((?:cmd|internal)/[a-z0-9/]+)`")
	row := regexp.MustCompile("^\\| `([a-z_]+)` \\|([^|]*)\\|([^|]*)\\|$")
	writers, readers = map[string][]string{}, map[string][]string{}
	for line := range strings.Lines(section) {
		m := row.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		for _, p := range packages.FindAllStringSubmatch(m[2], -1) {
			writers[m[1]] = append(writers[m[1]], p[1])
		}
		for _, p := range packages.FindAllStringSubmatch(m[3], -1) {
			readers[m[1]] = append(readers[m[1]], p[1])
		}
	}
	return writers, readers
}

// TestTablesHaveTheirOwners holds the service's code to the tables' owners in
// docs/development.md: every table the migrations create has a row there, a statement that
// writes a table is in a package named as its writer, and one that reads it in a writer or a
// reader. Tests are left out (they set up the fixtures they need).
func TestTablesHaveTheirOwners(t *testing.T) {
	t.Parallel()
	writers, readers := owners(t)
	create := regexp.MustCompile(`CREATE TABLE ([a-z_]+)`)
	var tables []string
	err := fs.WalkDir(migrations.Files, ".", func(path string, _ fs.DirEntry, err error) error {
		if err != nil || !strings.HasSuffix(path, ".up.sql") {
			return err
		}
		sql, err := fs.ReadFile(migrations.Files, path)
		for _, m := range create.FindAllStringSubmatch(string(sql), -1) {
			tables = append(tables, m[1])
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range tables {
		if len(writers[table]) == 0 {
			t.Errorf("table %s (migrations) has no writer in docs/development.md's tables' owners", table)
		}
	}

	type statement struct{ writes, any *regexp.Regexp }
	statements := map[string]statement{}
	for _, table := range tables {
		statements[table] = statement{
			writes: regexp.MustCompile(`\b(INSERT INTO|UPDATE|DELETE FROM)\s+` + table + `\b`),
			any:    regexp.MustCompile(`\b(INSERT INTO|UPDATE|DELETE FROM|FROM|JOIN)\s+` + table + `\b`),
		}
	}
	for _, root := range []string{"../cmd", "../internal"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			pkg := filepath.ToSlash(filepath.Dir(strings.TrimPrefix(path, "../")))
			for table, st := range statements {
				switch {
				case st.writes.Match(src) && !slices.Contains(writers[table], pkg):
					t.Errorf("%s writes %s, whose writers are %v", path, table, writers[table])
				case st.any.Match(src) && !slices.Contains(writers[table], pkg) && !slices.Contains(readers[table], pkg):
					t.Errorf("%s reads %s, whose owners are %v (read also by %v)", path, table, writers[table], readers[table])
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
