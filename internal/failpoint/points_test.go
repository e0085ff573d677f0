package failpoint_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/eventforge/eventforge/internal/failpoint"
)

// pointConsts maps each constant declared in points.go to its value.
func pointConsts(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "points.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, name := range vs.Names {
			lit, ok := vs.Values[i].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				t.Fatalf("points.go: %s is not a string literal", name.Name)
			}
			consts[name.Name], _ = strconv.Unquote(lit.Value)
		}
		return true
	})
	return consts
}

// TestEveryPointIsEvaluated parses the module's production Go files and
// finds each failpoint.Eval call: its name must be one of the constants of
// points.go (never a literal or another package's name), and each point in
// Points must be evaluated by at least one call.
func TestEveryPointIsEvaluated(t *testing.T) {
	consts := pointConsts(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	evaluated := map[string][]string{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "node_modules", "testdata", "e2e":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		local := "failpoint" // the package's name where it is imported
		if f.Name.Name == "failpoint" {
			return nil // the package itself only defines Eval
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			fun, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || fun.Sel.Name != "Eval" || !isIdent(fun.X, local) || len(call.Args) != 2 {
				return true
			}
			pos := fset.Position(call.Pos())
			rel, _ := filepath.Rel(root, pos.Filename)
			where := rel + ":" + strconv.Itoa(pos.Line)
			arg, ok := call.Args[1].(*ast.SelectorExpr)
			if !ok || !isIdent(arg.X, local) {
				t.Errorf("%s: failpoint.Eval with %s; name a constant of internal/failpoint/points.go", where, describe(call.Args[1]))
				return true
			}
			name, ok := consts[arg.Sel.Name]
			if !ok {
				t.Errorf("%s: failpoint.Eval with failpoint.%s, not a point of points.go", where, arg.Sel.Name)
				return true
			}
			evaluated[name] = append(evaluated[name], where)
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range failpoint.Points() {
		if len(evaluated[p]) == 0 {
			t.Errorf("point %s is listed but no production code evaluates it", p)
		}
	}
	for name, at := range evaluated {
		if !slices.Contains(failpoint.Points(), name) {
			t.Errorf("point %s is evaluated (%v) but missing from Points()", name, at)
		}
	}
	if len(consts) != len(failpoint.Points()) {
		t.Errorf("points.go declares %d names, Points() lists %d", len(consts), len(failpoint.Points()))
	}
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// describe describes an expression for an error message.
func describe(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.BasicLit:
		return "the literal " + e.Value
	case *ast.Ident:
		return "the identifier " + e.Name
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok {
			return x.Name + "." + e.Sel.Name
		}
	}
	return "an expression"
}
