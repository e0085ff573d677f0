package codesize

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// MaxBackReferences is the most references between the files of one
// package under cdc/ that may run back up: under the best order of its
// files (a file above the files it uses), this many references at most
// point from a file to one above it. A package whose files use one another
// in a circle reads as one object spread over files; the relay's stages
// keep their files in one direction (docs/architecture.md, "The relay").
const MaxBackReferences = 3

// maxRoomFiles is the most non-test files the cdc root package may hold:
// its Config and Run; the stages are packages of their own.
const maxRoomFiles = 6

// TestRelayFilesReferenceDownward counts, for every package under cdc/, the
// references between its files that must run back up (fileBackReferences)
// and fails above MaxBackReferences; it also holds the cdc root to
// maxRoomFiles files. `go test ./internal/codesize -run Downward -v` prints
// every package's count.
func TestRelayFilesReferenceDownward(t *testing.T) {
	root := filepath.Join("..", "..", "cdc")
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && !skipDirs[d.Name()] {
			dirs = append(dirs, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 10 {
		t.Fatalf("found %d packages under %s; the walk is broken", len(dirs), root)
	}
	for _, dir := range dirs {
		files, back, err := fileBackReferences(dir)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(filepath.Join("..", ".."), dir)
		t.Logf("%s: %d files, %d references run back up", rel, files, back)
		if back > MaxBackReferences {
			t.Errorf("%s: %d references between its files run back up, more than %d: give the package a direction (types below, the loop above)", rel, back, MaxBackReferences)
		}
		if dir == root && files > maxRoomFiles {
			t.Errorf("%s holds %d files, more than %d: a stage belongs in a package of its own", rel, files, maxRoomFiles)
		}
	}
}

// TestFileBackReferences holds the count to hand-made packages.
func TestFileBackReferences(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int
	}{
		{"one direction", map[string]string{
			"a.go": "package p\nfunc A() int { return B() }\n",
			"b.go": "package p\nfunc B() int { return C }\n",
			"c.go": "package p\nconst C = 1\n",
		}, 0},
		{"two files using each other", map[string]string{
			"a.go": "package p\ntype T struct{}\nfunc (T) A() { T{}.B() }\n",
			"b.go": "package p\nfunc (T) B() {}\nfunc X() { T{}.A() }\n",
		}, 1},
		{"a local named like a declaration is no reference", map[string]string{
			"a.go": "package p\nfunc run() {}\n",
			"b.go": "package p\nfunc B() { run := 1; _ = run }\n",
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, src := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, got, err := fileBackReferences(dir)
			if err != nil || got != tc.want {
				t.Fatalf("fileBackReferences = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

// fileBackReferences parses the non-test Go files of dir, resolves every
// identifier to what the package declares (go/types; imports are left
// unresolved, only the package's own names matter), and returns the number
// of files and the fewest file-to-file references that must point up under
// the best order of the files: within each group of files that use one
// another in a circle (a strongly connected component), every order is
// tried.
func fileBackReferences(dir string) (files, back int, err error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, err
	}
	pkgs := map[string][]*ast.File{} // by package name
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			return 0, 0, err
		}
		pkgs[f.Name.Name] = append(pkgs[f.Name.Name], f)
	}
	edges := map[[2]string]bool{}
	for name, syntax := range pkgs {
		files += len(syntax)
		info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
		conf := types.Config{Importer: unresolved{}, Error: func(error) {}}
		pkg, _ := conf.Check(name, fset, syntax, info)
		for id, obj := range info.Uses {
			if obj == nil || obj.Pkg() != pkg || !obj.Pos().IsValid() {
				continue
			}
			if v, ok := obj.(*types.Var); ok && !v.IsField() && v.Parent() != pkg.Scope() {
				continue // locals and parameters
			}
			from, to := filepath.Base(fset.Position(id.Pos()).Filename), filepath.Base(fset.Position(obj.Pos()).Filename)
			if from != to {
				edges[[2]string{from, to}] = true
			}
		}
	}
	for _, group := range components(edges) {
		back += fewestUp(group, edges)
	}
	return files, back, nil
}

// unresolved is an importer that resolves nothing.
type unresolved struct{}

func (unresolved) Import(path string) (*types.Package, error) {
	return nil, fmt.Errorf("%s: not resolved", path)
}

// components returns the strongly connected components of the graph with
// more than one file (Tarjan).
func components(edges map[[2]string]bool) [][]string {
	out := map[string][]string{}
	var names []string
	for e := range edges {
		if out[e[0]] == nil {
			names = append(names, e[0])
		}
		out[e[0]] = append(out[e[0]], e[1])
	}
	slices.Sort(names)
	index, low, onStack := map[string]int{}, map[string]int{}, map[string]bool{}
	var stack []string
	var groups [][]string
	var visit func(v string)
	visit = func(v string) {
		index[v], low[v] = len(index), len(index)
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range out[v] {
			if _, seen := index[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			var g []string
			for {
				w := stack[len(stack)-1]
				stack, onStack[w] = stack[:len(stack)-1], false
				g = append(g, w)
				if w == v {
					break
				}
			}
			if len(g) > 1 {
				groups = append(groups, g)
			}
		}
	}
	for _, n := range names {
		if _, seen := index[n]; !seen {
			visit(n)
		}
	}
	return groups
}

// fewestUp tries every order of group, bottom first, and returns the
// fewest references within it that point up. A group over eight files is
// counted in one order (all of its references but one per file): such a
// circle is far past the bound anyway.
func fewestUp(group []string, edges map[[2]string]bool) int {
	inGroup := 0
	for e := range edges {
		if slices.Contains(group, e[0]) && slices.Contains(group, e[1]) {
			inGroup++
		}
	}
	if len(group) > 8 {
		return inGroup - len(group) + 1
	}
	best := inGroup
	perm := slices.Clone(group)
	var try func(k int)
	try = func(k int) {
		if k == len(perm) {
			up := 0
			for e := range edges {
				f, t := slices.Index(perm, e[0]), slices.Index(perm, e[1])
				if f >= 0 && t > f {
					up++
				}
			}
			best = min(best, up)
			return
		}
		for i := k; i < len(perm); i++ {
			perm[k], perm[i] = perm[i], perm[k]
			try(k + 1)
			perm[k], perm[i] = perm[i], perm[k]
		}
	}
	try(0)
	return best
}
