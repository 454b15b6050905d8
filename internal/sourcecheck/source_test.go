package sourcecheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// root is the module's root, from this package's folder.
const root = "../.."

// decl is one declaration of the module, by the names a doc gives it:
// "Func", "Type.Method", "Type.field", "pkg.Name".
type decl struct {
	names []string
	file  string // slash path from the module's root
}

// moduleDecls parses every non-test Go file of the module, but e2e's: its
// functions, methods, types with their fields and methods, variables and
// constants.
func moduleDecls(t *testing.T) (decls []decl, types map[string]bool, pkgs map[string]bool) {
	t.Helper()
	types, pkgs = map[string]bool{}, map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(p, root+"/"))
		if d.IsDir() {
			if name := d.Name(); name == "testdata" || name == "e2e" || name == "clients" || name == "deploy" || strings.HasPrefix(name, ".") && rel != "" && p != root {
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
		pkgs[f.Name.Name] = true
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						types[s.Name.Name] = true
						decls = append(decls, decl{names: []string{s.Name.Name, f.Name.Name + "." + s.Name.Name}, file: rel})
						decls = append(decls, members(s, rel)...)
					case *ast.ValueSpec:
						for _, n := range s.Names {
							decls = append(decls, decl{names: []string{n.Name, f.Name.Name + "." + n.Name}, file: rel})
						}
					}
				}
			case *ast.FuncDecl:
				name := d.Name.Name
				names := []string{name}
				if d.Recv != nil {
					names = []string{recvName(d.Recv.List[0].Type) + "." + name}
				} else if ast.IsExported(name) {
					names = append(names, f.Name.Name+"."+name)
				}
				decls = append(decls, decl{names: names, file: rel})
			}
		}
		return nil
	})
	require.NoError(t, err)
	return decls, types, pkgs
}

// members are the fields of a struct type and the methods of an
// interface type, as "Type.name".
func members(s *ast.TypeSpec, file string) []decl {
	var list *ast.FieldList
	switch t := s.Type.(type) {
	case *ast.StructType:
		list = t.Fields
	case *ast.InterfaceType:
		list = t.Methods
	default:
		return nil
	}
	var out []decl
	for _, f := range list.List {
		for _, n := range f.Names {
			out = append(out, decl{names: []string{s.Name.Name + "." + n.Name}, file: file})
		}
	}
	return out
}

func recvName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvName(e.X)
	case *ast.IndexExpr:
		return recvName(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// walkSections returns the sections of docs/design.md that walk one
// heartbeat through the code.
func walkSections(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "design.md"))
	require.NoError(t, err)
	doc := string(b)
	start := strings.Index(doc, "## One heartbeat in memory mode")
	end := strings.Index(doc, "## Backends and the scaling model")
	require.True(t, start >= 0 && end > start, "docs/design.md has its two walks, then its backends")
	return doc[start:end]
}

var (
	// A name in backquotes followed, in parentheses, by the file it is in:
	// "`Worker.answer` (`consumer/heartbeat.go`)" or "(`Replica.takeTurn`,
	// `state/replica_run.go`".
	placed = regexp.MustCompile("`([A-Za-z_][\\w]*(?:\\.[A-Za-z_]\\w*)?)`,? \\(?`([\\w/]+\\.go)`")
	// Any code name in backquotes: a Go identifier, or two joined by a dot.
	named = regexp.MustCompile("`([A-Za-z_]\\w*(?:\\.[A-Za-z_]\\w*)?)`")
	// Any file in backquotes.
	file = regexp.MustCompile("`([\\w/.-]+\\.go)`")
)

// TestDesignWalkNamesTheCode: every file docs/design.md's walk names
// exists; every function it places in a file is declared there; every
// name of the module's types or packages it gives is declared somewhere.
func TestDesignWalkNamesTheCode(t *testing.T) {
	walk := walkSections(t)
	decls, types, pkgs := moduleDecls(t)
	where := map[string][]string{}
	for _, d := range decls {
		for _, n := range d.names {
			where[n] = append(where[n], d.file)
		}
	}
	for _, m := range file.FindAllStringSubmatch(walk, -1) {
		_, err := os.Stat(filepath.Join(root, m[1]))
		assert.NoError(t, err, "design.md names %s", m[1])
	}
	checked := 0
	for _, m := range placed.FindAllStringSubmatch(walk, -1) {
		name, path := m[1], m[2]
		if files, ok := where[name]; ok || isModuleName(name, types, pkgs) {
			assert.Contains(t, files, path, "design.md places %s in %s", name, path)
			checked++
		}
	}
	assert.Greater(t, checked, 20, "the walk places the functions it names in their files")
	for _, m := range named.FindAllStringSubmatch(walk, -1) {
		name := m[1]
		if !strings.Contains(name, ".") || !isModuleName(name, types, pkgs) {
			continue
		}
		if types[name[strings.Index(name, ".")+1:]] && pkgs[name[:strings.Index(name, ".")]] {
			continue // a type of a package: state.Report
		}
		assert.NotEmpty(t, where[name], "design.md names %s, which the module does not declare", name)
	}
}

// isModuleName reports whether name's first part is one of the module's
// types or packages: a name the module must declare.
func isModuleName(name string, types, pkgs map[string]bool) bool {
	first, _, _ := strings.Cut(name, ".")
	return types[first] || pkgs[first] && first != "nats" && first != "time"
}
