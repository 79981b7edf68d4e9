package main

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// modes are the harness's modes: each imports the packages by concern (client, traffic,
// failpoint, cluster, model, verdict, report, env) and none imports another mode, so that a
// mode changes without touching the others (docs/loadtest.md).
var modes = []string{"sale", "benchmarks", "faults", "opening"}

// TestModesImportNoOtherMode reads the imports of every file of every mode, tests included.
func TestModesImportNoOtherMode(t *testing.T) {
	t.Parallel()
	const module = "github.com/stocksvc/stocksvc/loadtest/"
	for _, mode := range modes {
		files, err := filepath.Glob(filepath.Join(mode, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("mode %s: no Go files (%v)", mode, err)
		}
		for _, name := range files {
			f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				other, ok := strings.CutPrefix(path, module)
				if ok && other != mode && slices.Contains(modes, strings.SplitN(other, "/", 2)[0]) {
					t.Errorf("%s imports the mode %s: move what they share into a package by concern", name, path)
				}
			}
		}
	}
}
