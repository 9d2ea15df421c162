package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// goTestJSON runs `go test -json` on a throwaway module holding src as its
// only test file, and returns the event stream.
func goTestJSON(t *testing.T, src string) []byte {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.test/m\n\ngo 1.22\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "m_test.go"), []byte(src), 0o644))
	cmd := exec.Command("go", "test", "-count=1", "-json", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, _ := cmd.Output() // a failing test exits 1; the stream is what counts
	require.NotEmpty(t, out)
	return out
}

const suite = `package m

import "testing"

func TestPasses(t *testing.T) { t.Log("quiet when passing") }

func TestSkips(t *testing.T) { t.Skip("needs a unicorn") }

func TestSub(t *testing.T) {
	t.Run("skipped", func(t *testing.T) { t.Skip("sub reason") })
	t.Run("ok", func(t *testing.T) {})
}
`

func TestSkipsFailTheRun(t *testing.T) {
	stream := goTestJSON(t, suite)
	var out bytes.Buffer
	err := filter(bytes.NewReader(stream), &out, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "2 test(s) skipped")
	assert.Contains(t, out.String(), "example.test/m TestSkips: m_test.go:7: needs a unicorn")
	assert.Contains(t, out.String(), "example.test/m TestSub/skipped: m_test.go:10: sub reason")
	assert.Regexp(t, `(?m)^ok  \texample.test/m\t`, out.String(), "the package line of plain go test")
	assert.NotContains(t, out.String(), "quiet when passing")
	assert.NotContains(t, out.String(), "=== RUN")
}

func TestAllowlistExcusesASkip(t *testing.T) {
	stream := goTestJSON(t, suite)
	allowFile := filepath.Join(t.TempDir(), "allow.txt")
	require.NoError(t, os.WriteFile(allowFile, []byte("# why\nexample.test/m TestSkips no unicorns on CI\nexample.test/m TestSub/skipped the same\n"), 0o644))
	allow, err := readAllowlist(allowFile)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, filter(bytes.NewReader(stream), &out, allow), out.String())
	assert.NotContains(t, out.String(), "skipped")
}

func TestFailuresPrintTheirOutput(t *testing.T) {
	stream := goTestJSON(t, `package m

import "testing"

func TestFails(t *testing.T) { t.Fatal("this is why") }
`)
	var out bytes.Buffer
	err := filter(bytes.NewReader(stream), &out, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "1 package(s) failed: example.test/m")
	assert.Contains(t, out.String(), "--- FAIL: TestFails")
	assert.Contains(t, out.String(), "this is why")
	assert.Regexp(t, `(?m)^FAIL\texample.test/m\t`, out.String())
}

func TestBuildFailureAndEmptyRun(t *testing.T) {
	stream := goTestJSON(t, "package m\n\nfunc broken( {}\n")
	var out bytes.Buffer
	require.Error(t, filter(bytes.NewReader(stream), &out, nil))
	assert.Contains(t, out.String(), "m_test.go:3")

	err := filter(bytes.NewReader(nil), &out, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no package")
}

func TestAllowlistSyntax(t *testing.T) {
	f := filepath.Join(t.TempDir(), "allow.txt")
	require.NoError(t, os.WriteFile(f, []byte("pkg TestOnlyTwoFields\n"), 0o644))
	_, err := readAllowlist(f)
	assert.ErrorContains(t, err, "allow.txt:1")
}
