package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// answeredSlugs finds every RFC 7807 type (slug) package api can answer,
// from its one home: the slug argument of api's problem helpers (any
// function of package api with a parameter named slug: problem, conflict,
// unprocessable, …) and Problem{Type: …} literals. A slug handed on as a
// helper's own slug parameter is that helper's caller's business; any other
// non-literal slug fails the test, since it could not be checked.
func answeredSlugs(t *testing.T, apiDir string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(apiDir, "*.go"))
	require.NoError(t, err)
	var parsed []*ast.File
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		parsed = append(parsed, f)
	}
	slugAt := map[string]int{} // helper name → index of its slug parameter
	for _, f := range parsed {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil {
				continue
			}
			i := 0
			for _, field := range fn.Type.Params.List {
				for _, name := range field.Names {
					if name.Name == "slug" {
						slugAt[fn.Name.Name] = i
					}
					i++
				}
				if len(field.Names) == 0 {
					i++
				}
			}
		}
	}
	require.Contains(t, slugAt, "problem", "api's problem(status, slug, detail) is where slugs are made")
	out := map[string]string{}
	add := func(e ast.Expr) {
		switch v := e.(type) {
		case *ast.BasicLit:
			if s, err := strconv.Unquote(v.Value); err == nil && v.Kind == token.STRING {
				out[s] = fset.Position(v.Pos()).String()
				return
			}
		case *ast.Ident:
			if v.Name == "slug" {
				return // a helper handing its own slug on
			}
		}
		t.Errorf("%s: a problem slug that is not a string literal cannot be checked against docs/api.md", fset.Position(e.Pos()))
	}
	for _, f := range parsed {
		ast.Inspect(f, func(n ast.Node) bool {
			switch v := n.(type) {
			case *ast.CallExpr:
				if id, ok := v.Fun.(*ast.Ident); ok {
					if i, ok := slugAt[id.Name]; ok && i < len(v.Args) {
						add(v.Args[i])
					}
				}
			case *ast.CompositeLit:
				if id, ok := v.Type.(*ast.Ident); ok && id.Name == "Problem" {
					for _, el := range v.Elts {
						if kv, ok := el.(*ast.KeyValueExpr); ok {
							if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Type" {
								add(kv.Value)
							}
						}
					}
				}
			}
			return true
		})
	}
	return out
}

// tableSlugs reads the first cell of every row of docs/api.md's errors
// table (the table headed "| `type` | Status | …" under "## Errors"), with
// its line.
func tableSlugs(t *testing.T, page string) map[string][]int {
	t.Helper()
	b, err := os.ReadFile(page)
	require.NoError(t, err)
	out := map[string][]int{}
	inErrors, inTable := false, false
	for i, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## ") {
			inErrors = strings.TrimSpace(line) == "## Errors"
			continue
		}
		if !inErrors {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		cells := splitRow(line)
		if !inTable {
			require.Equal(t, "`type`", cells[0], "docs/api.md:%d: the errors table's header", i+1)
			inTable = true
			continue
		}
		if strings.HasPrefix(cells[0], "---") {
			continue
		}
		slug := strings.Trim(cells[0], "`")
		out[slug] = append(out[slug], i+1)
	}
	require.NotEmpty(t, out, "no errors table under ## Errors in docs/api.md")
	return out
}

// quotedInTests reports which of slugs appear as a quoted string in a
// _test.go file of the repository (outside docs/): some test looks for
// them in an answer.
func quotedInTests(t *testing.T, root string, slugs []string) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel, _ := filepath.Rel(root, path); rel == "docs" || (strings.HasPrefix(d.Name(), ".") && rel != ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, s := range slugs {
			if !seen[s] && regexp.MustCompile(`"`+regexp.QuoteMeta(s)+`"`).Match(b) {
				seen[s] = true
			}
		}
		return nil
	})
	require.NoError(t, err)
	return seen
}

// TestErrorSlugsDocumented: docs/api.md's errors table lists each slug the
// API can answer exactly once, and nothing else; and every slug in it is
// looked for by some test.
func TestErrorSlugsDocumented(t *testing.T) {
	root := repoRoot(t)
	code := answeredSlugs(t, filepath.Join(root, "api"))
	table := tableSlugs(t, filepath.Join(root, "docs", "api.md"))
	var missing, extra, twice []string
	for slug, where := range code {
		if _, ok := table[slug]; !ok {
			missing = append(missing, slug+" (answered at "+strings.TrimPrefix(where, root+string(filepath.Separator))+")")
		}
	}
	for slug, lines := range table {
		if _, ok := code[slug]; !ok {
			extra = append(extra, slug+" (docs/api.md:"+strconv.Itoa(lines[0])+")")
		}
		if len(lines) > 1 {
			twice = append(twice, slug+" (docs/api.md lines "+joinInts(lines)+")")
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	slices.Sort(twice)
	assert.Empty(t, missing, "answered by the API but not in docs/api.md's errors table")
	assert.Empty(t, extra, "in docs/api.md's errors table but answered nowhere in api/")
	assert.Empty(t, twice, "one row per slug in docs/api.md's errors table")

	slugs := slices.Sorted(func(yield func(string) bool) {
		for s := range table {
			if !yield(s) {
				return
			}
		}
	})
	tested := quotedInTests(t, root, slugs)
	var untested []string
	for _, s := range slugs {
		if !tested[s] {
			untested = append(untested, s)
		}
	}
	assert.Empty(t, untested, "in docs/api.md's errors table but no test looks for it (no _test.go quotes it)")
}

func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ", ")
}
