package tools

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/sdk"
)

// call runs a tool handler and decodes its JSON-string result.
func call(t *testing.T, tool sdk.Tool, input any) map[string]any {
	t.Helper()
	raw, err := json.Marshal(input)
	require.NoError(t, err)
	out, err := tool.Handler(context.Background(), raw)
	require.NoError(t, err, "file tools never fail the turn")
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(out.(string)), &m), "%v", out)
	return m
}

func write(t *testing.T, p, content string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
}

// layout builds base/{workspace,secrets} and returns base.
func layout(t *testing.T) string {
	base := t.TempDir()
	write(t, filepath.Join(base, "workspace", "notes.txt"), "hello")
	write(t, filepath.Join(base, "workspace", ".env"), "TOKEN=1")
	write(t, filepath.Join(base, "workspace", "subdir", "data.json"), `{"a":1}`)
	write(t, filepath.Join(base, "secrets", "keys.txt"), "k")
	return base
}

func TestReadFileWorkedExample(t *testing.T) {
	base := layout(t)
	ws := filepath.Join(base, "workspace")
	cfg := FileConfig{AllowedDirs: []string{ws}, DeniedExtensions: []string{"env"}}
	read := ReadFile(cfg)

	got := call(t, read, map[string]string{"path": filepath.Join(ws, "notes.txt")})
	assert.Equal(t, "hello", got["content"])
	got = call(t, read, map[string]string{"path": filepath.Join(ws, "subdir", "data.json")})
	assert.Equal(t, `{"a":1}`, got["content"])

	for _, p := range []string{
		filepath.Join(ws, ".env"),
		ws + "/../secrets/keys.txt",
		"/etc/passwd",
	} {
		got := call(t, read, map[string]string{"path": p})
		assert.Contains(t, got["error"], "path not permitted", p)
		assert.NotContains(t, got, "content", p)
	}
	assert.Contains(t, call(t, read, map[string]string{"path": filepath.Join(ws, "missing.txt")})["error"], "read failed")
	assert.Contains(t, call(t, read, map[string]any{"path": 7})["error"], "requires a string path")
}

func TestRelativePathsResolveFromWorkingDir(t *testing.T) {
	base := layout(t)
	t.Chdir(base)
	read := ReadFile(FileConfig{AllowedDirs: []string{"./workspace"}})
	assert.Equal(t, "hello", call(t, read, map[string]string{"path": "./workspace/notes.txt"})["content"])
	assert.Contains(t, call(t, read, map[string]string{"path": "workspace/../secrets/keys.txt"})["error"], "outside allowed_dirs")
}

func TestEmptyAllowedDirsPermitsNothing(t *testing.T) {
	base := layout(t)
	got := call(t, ReadFile(FileConfig{}), map[string]string{"path": filepath.Join(base, "workspace", "notes.txt")})
	assert.Contains(t, got["error"], "outside allowed_dirs")
}

func TestSymlinkEscapeIsRejected(t *testing.T) {
	base := layout(t)
	ws := filepath.Join(base, "workspace")
	require.NoError(t, os.Symlink(filepath.Join(base, "secrets", "keys.txt"), filepath.Join(ws, "innocent.txt")))
	require.NoError(t, os.Symlink(filepath.Join(base, "secrets"), filepath.Join(ws, "linkdir")))
	require.NoError(t, os.Symlink(filepath.Join(ws, "notes.txt"), filepath.Join(ws, "alias.txt")))
	cfg := FileConfig{AllowedDirs: []string{ws}}

	assert.Contains(t, call(t, ReadFile(cfg), map[string]string{"path": filepath.Join(ws, "innocent.txt")})["error"], "outside allowed_dirs")
	assert.Contains(t, call(t, ReadFile(cfg), map[string]string{"path": filepath.Join(ws, "linkdir", "keys.txt")})["error"], "outside allowed_dirs")
	assert.Equal(t, "hello", call(t, ReadFile(cfg), map[string]string{"path": filepath.Join(ws, "alias.txt")})["content"], "a link inside the root is fine")

	// Writing through a symlinked directory cannot escape either.
	got := call(t, WriteFile(cfg), map[string]string{"path": filepath.Join(ws, "linkdir", "new.txt"), "content": "x"})
	assert.Contains(t, got["error"], "outside allowed_dirs")
	assert.NoFileExists(t, filepath.Join(base, "secrets", "new.txt"))
}

func TestExtensionAndRegexRules(t *testing.T) {
	base := layout(t)
	ws := filepath.Join(base, "workspace")
	write(t, filepath.Join(ws, "report.TXT"), "upper")
	write(t, filepath.Join(ws, "draft-report.txt"), "draft")
	write(t, filepath.Join(ws, "Makefile"), "all:")
	cfg := FileConfig{
		AllowedDirs:       []string{ws},
		AllowedExtensions: []string{".txt", "json"},
		DeniedExtensions:  []string{"json"},
		AllowRegex:        regexp.MustCompile(`report`),
		DenyRegex:         regexp.MustCompile(`^draft`),
	}
	read := ReadFile(cfg)
	assert.Equal(t, "upper", call(t, read, map[string]string{"path": filepath.Join(ws, "report.TXT")})["content"], "extensions are case-insensitive")
	assert.Contains(t, call(t, read, map[string]string{"path": filepath.Join(ws, "subdir", "data.json")})["error"], "denied", "denied wins over allowed")
	assert.Contains(t, call(t, read, map[string]string{"path": filepath.Join(ws, "Makefile")})["error"], "allowed_extensions")
	assert.Contains(t, call(t, read, map[string]string{"path": filepath.Join(ws, "draft-report.txt")})["error"], "deny_regex", "deny wins over allow")
	assert.Contains(t, call(t, read, map[string]string{"path": filepath.Join(ws, "notes.txt")})["error"], "allow_regex")
}

func TestWriteFile(t *testing.T) {
	base := layout(t)
	ws := filepath.Join(base, "workspace")
	write := WriteFile(FileConfig{AllowedDirs: []string{ws}, DeniedExtensions: []string{"env"}})

	got := call(t, write, map[string]string{"path": filepath.Join(ws, "out.txt"), "content": "héllo"})
	assert.EqualValues(t, 6, got["bytes_written"])
	data, err := os.ReadFile(filepath.Join(ws, "out.txt"))
	require.NoError(t, err)
	assert.Equal(t, "héllo", string(data))

	got = call(t, write, map[string]string{"path": filepath.Join(ws, "new", "deep", "x.txt"), "content": "x"})
	assert.Contains(t, got["error"], "parent directory does not exist")
	assert.NoDirExists(t, filepath.Join(ws, "new"))

	assert.Contains(t, call(t, write, map[string]string{"path": filepath.Join(ws, ".env"), "content": "x"})["error"], "denied")
	assert.Contains(t, call(t, write, map[string]string{"path": filepath.Join(base, "outside.txt"), "content": "x"})["error"], "outside")

	mk := WriteFile(FileConfig{AllowedDirs: []string{ws}, CreateParents: true})
	got = call(t, mk, map[string]string{"path": filepath.Join(ws, "new", "deep", "x.txt"), "content": "x"})
	assert.EqualValues(t, 1, got["bytes_written"])
	assert.FileExists(t, filepath.Join(ws, "new", "deep", "x.txt"))
}

func explore(t *testing.T, tool sdk.Tool, input any) []FileEntry {
	t.Helper()
	raw, _ := json.Marshal(input)
	out, err := tool.Handler(context.Background(), raw)
	require.NoError(t, err)
	var entries []FileEntry
	require.NoError(t, json.Unmarshal([]byte(out.(string)), &entries), "%v", out)
	return entries
}

func TestExploreFiles(t *testing.T) {
	base := layout(t)
	ws := filepath.Join(base, "workspace")
	require.NoError(t, os.Symlink(filepath.Join(base, "secrets"), filepath.Join(ws, "escape")))
	require.NoError(t, os.Symlink(ws, filepath.Join(ws, "subdir", "loop")))
	tool := ExploreFiles(FileConfig{AllowedDirs: []string{ws}, DeniedExtensions: []string{"env"}})

	flat := explore(t, tool, map[string]any{"path": ws})
	assert.Equal(t, []FileEntry{
		{Path: "notes.txt", SizeBytes: 5},
		{Path: "subdir", IsDir: true},
	}, flat, "no .env, no escaping link, not recursive")

	deep := explore(t, tool, map[string]any{"path": ws, "recursive": true})
	var paths []string
	for _, e := range deep {
		paths = append(paths, e.Path)
	}
	assert.Equal(t, []string{"notes.txt", "subdir", "subdir/data.json", "subdir/loop"}, paths, "a link back into the root is listed, not followed")

	// Everything listed is readable by read_file with the same config.
	read := ReadFile(FileConfig{AllowedDirs: []string{ws}, DeniedExtensions: []string{"env"}})
	for _, e := range deep {
		if !e.IsDir {
			assert.NotContains(t, call(t, read, map[string]string{"path": filepath.Join(ws, e.Path)}), "error", e.Path)
		}
	}

	var bad map[string]any
	out, err := tool.Handler(context.Background(), json.RawMessage(`{"path":"`+filepath.Join(base, "secrets")+`"}`))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out.(string)), &bad))
	assert.Contains(t, bad["error"], "path not permitted")
	out, err = tool.Handler(context.Background(), json.RawMessage(`{"path":"`+filepath.Join(ws, "notes.txt")+`"}`))
	require.NoError(t, err)
	assert.Contains(t, out, "not a directory")
}

func TestExploreWithAllowedExtensionsListsOnlyMatchingFiles(t *testing.T) {
	base := layout(t)
	ws := filepath.Join(base, "workspace")
	tool := ExploreFiles(FileConfig{AllowedDirs: []string{ws}, AllowedExtensions: []string{"json"}})
	assert.Equal(t, []FileEntry{{Path: "subdir/data.json", SizeBytes: 7}}, explore(t, tool, map[string]any{"path": ws, "recursive": true}))
}

// A hard link inside the root to a file outside it resolves to a path
// inside the root, so only the link count gives it away.
func TestHardLinkToOutsideFileIsRefused(t *testing.T) {
	base := layout(t)
	ws := filepath.Join(base, "workspace")
	link := filepath.Join(ws, "innocent.txt")
	require.NoError(t, os.Link(filepath.Join(base, "secrets", "keys.txt"), link))
	cfg := FileConfig{AllowedDirs: []string{ws}}

	got := call(t, ReadFile(cfg), map[string]string{"path": link})
	assert.Nil(t, got["content"], "read through a hard link: %v", got)
	assert.Contains(t, got["error"], "hard link")

	got = call(t, WriteFile(cfg), map[string]string{"path": link, "content": "pwned"})
	assert.Contains(t, got["error"], "hard link")
	secret, err := os.ReadFile(filepath.Join(base, "secrets", "keys.txt"))
	require.NoError(t, err)
	assert.Equal(t, "k", string(secret), "the outside file is untouched")

	// Ordinary files still work both ways.
	got = call(t, WriteFile(cfg), map[string]string{"path": filepath.Join(ws, "new.txt"), "content": "fresh"})
	assert.EqualValues(t, 5, got["bytes_written"])
	got = call(t, WriteFile(cfg), map[string]string{"path": filepath.Join(ws, "new.txt"), "content": "again"})
	assert.EqualValues(t, 5, got["bytes_written"])
	assert.Equal(t, "again", call(t, ReadFile(cfg), map[string]string{"path": filepath.Join(ws, "new.txt")})["content"])
}

func TestReadFileSizeIsCapped(t *testing.T) {
	base := layout(t)
	ws := filepath.Join(base, "workspace")
	write(t, filepath.Join(ws, "big.txt"), strings.Repeat("x", 2048))
	cfg := FileConfig{AllowedDirs: []string{ws}, MaxReadBytes: 1024}

	got := call(t, ReadFile(cfg), map[string]string{"path": filepath.Join(ws, "big.txt")})
	assert.Nil(t, got["content"])
	assert.Contains(t, got["error"], "larger than the 1024-byte read limit")
	write(t, filepath.Join(ws, "edge.txt"), strings.Repeat("y", 1024))
	got = call(t, ReadFile(cfg), map[string]string{"path": filepath.Join(ws, "edge.txt")})
	assert.Len(t, got["content"], 1024)

	// The default cap applies when none is set.
	write(t, filepath.Join(ws, "huge.txt"), strings.Repeat("z", DefaultMaxReadBytes+1))
	got = call(t, ReadFile(FileConfig{AllowedDirs: []string{ws}}), map[string]string{"path": filepath.Join(ws, "huge.txt")})
	assert.Contains(t, got["error"], "read limit")
}
