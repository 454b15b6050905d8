package sourcecheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lockWaits are the functions that let go of a lock their caller holds and
// take it again before they return, as sync.Cond.Wait does; their names
// say so.
var lockWaits = map[string]bool{"waitLocked": true}

// TestEveryLockIsReleasedWhereItIsTaken: in every non-test function of the
// module, each mutex locked is unlocked in the same function (or by its
// defer), and none is unlocked that the function did not lock, so that a
// reader checks each function alone; a function whose name ends in Locked
// (its caller holds the lock) neither takes nor releases one. Function
// literals are functions of their own.
func TestEveryLockIsReleasedWhereItIsTaken(t *testing.T) {
	fset := token.NewFileSet()
	funcs := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); p != root && (name == "testdata" || name == "e2e" || name == "clients" || name == "deploy" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var body *ast.BlockStmt
			name := "a function literal"
			switch fn := n.(type) {
			case *ast.FuncDecl:
				body, name = fn.Body, fn.Name.Name
			case *ast.FuncLit:
				body = fn.Body
			}
			if body == nil || lockWaits[name] {
				return true
			}
			funcs++
			if strings.HasSuffix(name, "Locked") {
				// Its caller holds the lock: it neither takes nor releases one.
				if locks, unlocks := lockCalls(body); len(locks)+len(unlocks) > 0 {
					assert.Fail(t, "a function named ...Locked takes or releases a lock", "%s: %s", fset.Position(n.Pos()), name)
				}
				return true
			}
			for _, problem := range lockBalance(body) {
				assert.Fail(t, "a lock taken and released in different functions", "%s: %s %s", fset.Position(n.Pos()), name, problem)
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	assert.Greater(t, funcs, 500, "the module's functions were read")
}

// lockBalance returns what is wrong with the locking of one function body,
// function literals inside it left out.
func lockBalance(body *ast.BlockStmt) []string {
	locks, unlocks := lockCalls(body)
	var out []string
	for m := range locks {
		if unlocks[m] == 0 {
			out = append(out, "locks "+m+" and never unlocks it")
		}
	}
	for m := range unlocks {
		if locks[m] == 0 {
			out = append(out, "unlocks "+m+", which it did not lock")
		}
	}
	return out
}

// lockCalls counts the Lock and Unlock calls of a function body by mutex,
// function literals inside it left out.
func lockCalls(body *ast.BlockStmt) (locks, unlocks map[string]int) {
	locks, unlocks = map[string]int{}, map[string]int{}
	ast.Inspect(body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			return false
		case *ast.CallExpr:
			se, ok := n.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			switch se.Sel.Name {
			case "Lock", "RLock":
				locks[exprString(se.X)]++
			case "Unlock", "RUnlock":
				unlocks[exprString(se.X)]++
			}
		}
		return true
	})
	return locks, unlocks
}

// exprString names the mutex of a Lock call: r.mu, s.probeMu.
func exprString(e ast.Expr) string {
	var b strings.Builder
	ast.Inspect(e, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok {
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(id.Name)
		}
		return true
	})
	return b.String()
}
