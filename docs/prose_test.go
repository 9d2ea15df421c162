package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/config"
)

// notOurs are BAE_* names the docs mention that bae-go deliberately does
// not read: the reference server's own, named to say what replaces them.
var notOurs = map[string]string{
	"BAE_DB_PATH":  "the reference server's SQLite path (docs/api.md: BAE_DATABASE_URL replaces it)",
	"BAE_OTEL_LOG": "the reference server's span-event log filter, documented as having no effect here",
}

// userToken is a ${NAME} token of a config example: it names the user's
// variable, not one of the code's.
var userToken = regexp.MustCompile(`\$\{[A-Za-z0-9_]+\}`)

var anyBAEName = regexp.MustCompile(`BAE_[A-Z0-9_]*[A-Z0-9]`)

// namedInGo is every "BAE_…" string literal in the repository's Go files
// (tests, benchmarks and the test harness included: the docs describe
// their variables too).
func namedInGo(t *testing.T, root string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel, _ := filepath.Rel(root, path); strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if v, err := strconv.Unquote(lit.Value); err == nil {
					for _, name := range anyBAEName.FindAllString(v, -1) {
						out[name] = true
					}
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestProseVariablesExist: every BAE_* name written anywhere in docs/*.md
// or README.md, prose included, is one the code reads or names (or one of
// the reference server's, listed in notOurs; a ${NAME} token in a config
// example is the user's). A name followed by "*"
// ("BAE_TEMPORAL_*") stands for a family: some name of the code starts
// with it.
func TestProseVariablesExist(t *testing.T) {
	root := repoRoot(t)
	inGo := namedInGo(t, root)
	require.Contains(t, inGo, "BAE_DATABASE_URL")
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	pages = append(pages, filepath.Join(root, "README.md"))
	family := regexp.MustCompile(`(BAE_[A-Z0-9_]*)\*`)
	var unknown []string
	for _, page := range pages {
		b, err := os.ReadFile(page)
		require.NoError(t, err)
		for i, line := range strings.Split(string(b), "\n") {
			line = userToken.ReplaceAllString(line, "")
			where := filepath.Base(page) + ":" + strconv.Itoa(i+1)
			for _, m := range family.FindAllStringSubmatch(line, -1) {
				if !slices.ContainsFunc(slices.Collect(mapKeys(inGo)), func(n string) bool { return strings.HasPrefix(n, m[1]) }) {
					unknown = append(unknown, m[0]+" ("+where+")")
				}
			}
			for _, name := range anyBAEName.FindAllString(family.ReplaceAllString(line, ""), -1) {
				if !inGo[name] && notOurs[name] == "" {
					unknown = append(unknown, name+" ("+where+")")
				}
			}
		}
	}
	assert.Empty(t, unknown, "named in the docs but by no code: a typo, a renamed variable, or a reference-server name to list in notOurs")
}

func mapKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestLogFilterClaims: BAE_LOG takes BAE's filter strings as well as bare
// levels (config.LogFromEnv), so no page may say it takes only a level.
func TestLogFilterClaims(t *testing.T) {
	lookup := func(v string) func(string) (string, bool) {
		return func(k string) (string, bool) { return v, k == "BAE_LOG" }
	}
	assert.Equal(t, slog.LevelDebug, config.LogFromEnv(lookup("warn,baesrv=debug")).Level, "a filter string's baesrv target sets the level")
	assert.Equal(t, slog.LevelWarn, config.LogFromEnv(lookup("warn")).Level)

	root := repoRoot(t)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	pages = append(pages, filepath.Join(root, "README.md"))
	onlyLevel := regexp.MustCompile("(?is)`BAE_LOG`[^.]{0,80}?\\b(not a filter|no filter|only a level|just a level)")
	for _, page := range pages {
		b, err := os.ReadFile(page)
		require.NoError(t, err)
		// Prose wraps: look across line breaks.
		text := strings.Join(strings.Fields(string(b)), " ")
		if m := onlyLevel.FindString(text); m != "" {
			t.Errorf("%s says BAE_LOG takes no filter string, which it does: %q", filepath.Base(page), m)
		}
	}
}
