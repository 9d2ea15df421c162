// Package docs_test keeps docs/*.md and the README true to the program: the
// environment variables and their defaults (env_test.go), every BAE_* name
// the prose mentions and claims about BAE_LOG (prose_test.go), the errors
// table of docs/api.md against the slugs the API answers (errors_test.go)
// and the offline walk-throughs (walk_test.go).
package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/launcher/schedule"
	"github.com/bae-go/bae-go/internal/launcher/trigger"
)

// How a variable is documented. Any docs/*.md page may hold a table whose
// header row starts with "Variable" and "Default":
//
//	| Variable | Default | Meaning |
//	|---|---|---|
//	| `BAE_EXAMPLE_TIMEOUT` | `30` | Seconds: how long … |
//	| `BAE_EXAMPLE_FILE` | unset | Path of … |
//
// The first cell names the variable (several may share a row:
// "`BAE_X_CERT` / `BAE_X_KEY`"). The default cell is checked against the
// code when it starts with a `backticked` value (or is one bare word other
// than "unset" or "none"): setting the variable to that value must change
// nothing the code reads. "<BAE_Y>/name" in a default stands for BAE_Y's
// default joined with name. Anything else ("unset", "_(none)_", "half the
// CPUs") documents the variable without a checked default. A table headed
// "| Variable | Read by | Meaning |" documents client-side variables
// (baectl, the SDK, the examples) without defaults.
//
// "Read by the code" means: a string literal "BAE_…" passed to a function
// (os.Getenv, os.LookupEnv, config's get, baectl's env.get, parseTimeout,
// …), or a constant with such a value passed to os.Getenv/os.LookupEnv, in
// a non-test Go file outside bench/ and internal/testing/ (the benchmarks'
// and test harness's own variables are described where they are used).
// A documented default is checked by the loaders below: read a new
// variable with a default in internal/config, in one of them, or add the
// function that reads it to loaders.
var loaders = map[string]func(lookup func(string) (string, bool)) (any, error){
	"config.ServerFromEnv":     func(l func(string) (string, bool)) (any, error) { return config.ServerFromEnv(l) },
	"config.LogFromEnv":        func(l func(string) (string, bool)) (any, error) { return config.LogFromEnv(l), nil },
	"schedule.SettingsFromEnv": func(l func(string) (string, bool)) (any, error) { return schedule.SettingsFromEnv(l) },
	"trigger.SettingsFromEnv":  func(l func(string) (string, bool)) (any, error) { return trigger.SettingsFromEnv(l) },
}

var bareName = regexp.MustCompile(`^BAE_[A-Z0-9_]+$`)

// readVariables finds every BAE_* name the code reads, with where.
func readVariables(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch {
			case rel == "bench", rel == filepath.Join("internal", "testing"), d.Name() == "testdata",
				strings.HasPrefix(d.Name(), ".") && rel != ".", d.Name() == "bin", d.Name() == "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		consts := map[string]string{} // constant name → BAE_* value
		ast.Inspect(f, func(n ast.Node) bool {
			if vs, ok := n.(*ast.ValueSpec); ok {
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if v, ok := baeLiteral(vs.Values[i]); ok {
							consts[name.Name] = v
						}
					}
				}
			}
			return true
		})
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			env := isOSEnvCall(call)
			for _, a := range call.Args {
				if v, ok := baeLiteral(a); ok {
					out[v] = fset.Position(a.Pos()).String()
				} else if id, ok := a.(*ast.Ident); ok && env && consts[id.Name] != "" {
					out[consts[id.Name]] = fset.Position(a.Pos()).String()
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	return out
}

func baeLiteral(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	v, err := strconv.Unquote(lit.Value)
	return v, err == nil && bareName.MatchString(v)
}

func isOSEnvCall(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "os" && (sel.Sel.Name == "Getenv" || sel.Sel.Name == "LookupEnv")
}

// docVar is one documented variable.
type docVar struct {
	name, where string
	// def is the checked default; hasDef says there is one.
	def    string
	hasDef bool
}

var (
	nameInCell = regexp.MustCompile(`BAE_[A-Z0-9_]+`)
	firstCode  = regexp.MustCompile("`([^`]*)`")
)

// documentedVariables reads the Variable tables of every docs/*.md page.
func documentedVariables(t *testing.T, docsDir string) []docVar {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(docsDir, "*.md"))
	require.NoError(t, err)
	var out []docVar
	for _, page := range pages {
		b, err := os.ReadFile(page)
		require.NoError(t, err)
		var header []string // the current table's header, nil outside tables
		inTable := false
		for i, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if !strings.HasPrefix(line, "|") {
				header, inTable = nil, false
				continue
			}
			cells := splitRow(line)
			if !inTable {
				header, inTable = cells, true
				continue
			}
			if len(header) < 2 || header[0] != "Variable" || strings.HasPrefix(cells[0], "---") || len(cells) < 2 {
				continue
			}
			where := filepath.Base(page) + ":" + strconv.Itoa(i+1)
			for _, name := range nameInCell.FindAllString(cells[0], -1) {
				v := docVar{name: name, where: where}
				if header[1] == "Default" {
					v.def, v.hasDef = literalDefault(cells[1])
				}
				out = append(out, v)
			}
		}
	}
	return out
}

func splitRow(line string) []string {
	parts := strings.Split(strings.Trim(line, "|"), "|")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// literalDefault is the value a default cell documents, if it documents one.
func literalDefault(cell string) (string, bool) {
	if strings.HasPrefix(cell, "`") {
		if m := firstCode.FindStringSubmatch(cell); m != nil {
			return m[1], true
		}
	}
	if cell != "" && !strings.ContainsAny(cell, " _*") && cell != "unset" && cell != "none" && cell != "-" {
		return cell, true
	}
	return "", false
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "go.mod"))
	return root
}

// TestEveryVariableDocumented: the BAE_* variables the code reads are
// exactly those the Variable tables of docs/*.md document.
func TestEveryVariableDocumented(t *testing.T) {
	root := repoRoot(t)
	read := readVariables(t, root)
	require.NotEmpty(t, read)
	documented := map[string]string{}
	for _, v := range documentedVariables(t, filepath.Join(root, "docs")) {
		documented[v.name] = v.where
	}
	var missing, unread []string
	for name, where := range read {
		if _, ok := documented[name]; !ok {
			missing = append(missing, name+" (read at "+strings.TrimPrefix(where, root+string(filepath.Separator))+")")
		}
	}
	for name, where := range documented {
		if _, ok := read[name]; !ok {
			unread = append(unread, name+" (documented at "+where+")")
		}
	}
	slices.Sort(missing)
	slices.Sort(unread)
	assert.Empty(t, missing, "read by the code but in no `| Variable | Default | Meaning |` table of docs/*.md (see the comment in docs/env_test.go)")
	assert.Empty(t, unread, "documented but read nowhere in the code")
}

// TestDocumentedDefaults: setting a variable to its documented default
// changes nothing, in at least one loader that reads it (and in none is it
// an error).
func TestDocumentedDefaults(t *testing.T) {
	vars := documentedVariables(t, filepath.Join(root(t), "docs"))
	defaults := map[string]string{}
	for _, v := range vars {
		if v.hasDef {
			defaults[v.name] = v.def
		}
	}
	// Which variables each loader reads, and what it makes of none.
	readBy := map[string][]string{}
	base := map[string]any{}
	for name, load := range loaders {
		got, err := load(func(k string) (string, bool) {
			readBy[k] = append(readBy[k], name)
			return "", false
		})
		require.NoError(t, err, "%s with nothing set", name)
		base[name] = got
	}
	checked := 0
	for _, v := range vars {
		if !v.hasDef {
			continue
		}
		def := expandDefault(v.def, defaults)
		names := readBy[v.name]
		if !assert.NotEmpty(t, names, "%s (%s) documents default %q, but no loader in docs/env_test.go reads %s: read it in internal/config through a function listed in loaders, or add its reader there", v.name, v.where, v.def, v.name) {
			continue
		}
		for _, name := range slices.Compact(slices.Sorted(slices.Values(names))) {
			got, err := loaders[name](func(k string) (string, bool) {
				if k == v.name {
					return def, true
				}
				return "", false
			})
			if assert.NoError(t, err, "%s=%q (documented default, %s) in %s", v.name, def, v.where, name) {
				assert.True(t, reflect.DeepEqual(base[name], got), "%s=%q (the default documented at %s) is not what %s uses when it is unset:\nunset:   %+v\ndefault: %+v", v.name, def, v.where, name, base[name], got)
			}
		}
		checked++
	}
	assert.Positive(t, checked)
}

func root(t *testing.T) string { return repoRoot(t) }

// expandDefault turns "<BAE_DATA_DIR>/admin-key.pem" into that variable's
// default joined with the rest.
func expandDefault(def string, defaults map[string]string) string {
	if !strings.HasPrefix(def, "<") {
		return def
	}
	end := strings.Index(def, ">")
	if end < 0 {
		return def
	}
	return filepath.Join(defaults[def[1:end]], def[end+1:])
}
