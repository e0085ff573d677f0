package codesize

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// testName is a Go test function's name as prose names it.
var testName = regexp.MustCompile(`\bTest[A-Z][A-Za-z0-9_]*`)

// testFunc is a Go test function's declaration.
var testFunc = regexp.MustCompile(`(?m)^func (Test[A-Z][A-Za-z0-9_]*)\(`)

// prefixOfAny reports whether name starts some test's name: a doc that
// gives a `-run` pattern names the tests it selects.
func prefixOfAny(name string, tests map[string]bool) bool {
	for t := range tests {
		if strings.HasPrefix(t, name) {
			return true
		}
	}
	return false
}

// TestDocsNameExistingTests: every test the docs and the README name is a
// test function of the module, so that a renamed or deleted test cannot
// leave a doc pointing at nothing.
func TestDocsNameExistingTests(t *testing.T) {
	root := filepath.Join("..", "..")
	tests := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && skipDirs[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range testFunc.FindAllSubmatch(src, -1) {
			tests[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(tests) < 100 {
		t.Fatalf("found %d test functions; the walk is broken", len(tests))
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, filepath.Join(root, "README.md"))
	for _, doc := range docs {
		src, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range testName.FindAllString(string(src), -1) {
			if !tests[name] && !prefixOfAny(name, tests) {
				t.Errorf("%s names %s, which no test file declares", filepath.Base(doc), name)
			}
		}
	}
}
