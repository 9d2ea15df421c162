package docs_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// The walk-throughs of README.md and docs/quickstart.md run as written.
//
// Every ```sh block of those pages runs, in order, in one bash shell per
// page (so a variable one block sets is there in the next), with
// `set -eo pipefail`, against a test server that stands in for `make dev`:
// the dev config (examples/bae-config/dev.toml) with the fake provider and
// the words MCP server, the admin key in ./bae-data/, and bin/ holding
// freshly built baectl, assistant and mcp-words. The documented addresses
// (127.0.0.1:8080, :8081 and the fake provider's :9999) are replaced with
// the test server's in commands, and back in their output.
//
// A block that cannot run offline in a test is marked, on the line just
// before its fence, with
//
//	<!-- doc-test: skip (the reason) -->
//
// A plain ``` block that follows a runnable block with only blank lines
// between is that block's output, and the real output must match it: "…"
// inside a line stands for any text, a line that is only "…" for any
// number of lines, and runs of spaces count as one.

const skipMarker = "<!-- doc-test: skip"

type block struct {
	line   int    // of the opening fence
	lang   string // "sh", "" (output), …
	body   string
	skip   bool
	output *block // the plain block documenting this one's output
}

var fence = regexp.MustCompile("^```([a-z]*)\\s*$")

// parseBlocks reads the fenced code blocks of a markdown page.
func parseBlocks(t *testing.T, page string) []*block {
	t.Helper()
	b, err := os.ReadFile(page)
	require.NoError(t, err)
	lines := strings.Split(string(b), "\n")
	var out []*block
	var prev *block
	blankSincePrev := true // only blank lines since the previous block ended
	for i := 0; i < len(lines); i++ {
		m := fence.FindStringSubmatch(lines[i])
		if m == nil || strings.HasPrefix(lines[i], " ") {
			if strings.TrimSpace(lines[i]) != "" {
				blankSincePrev = false
			}
			continue
		}
		bl := &block{line: i + 1, lang: m[1]}
		for j := i - 1; j >= 0; j-- {
			if s := strings.TrimSpace(lines[j]); s != "" {
				bl.skip = strings.HasPrefix(s, skipMarker)
				break
			}
		}
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, lines[i])
		}
		require.Less(t, i, len(lines), "%s:%d: unclosed code block", page, bl.line)
		bl.body = strings.Join(body, "\n")
		if bl.lang == "" && prev != nil && prev.lang == "sh" && blankSincePrev {
			prev.output = bl
		} else {
			out = append(out, bl)
		}
		prev, blankSincePrev = bl, true
	}
	return out
}

// TestWalkThroughs runs README.md's and docs/quickstart.md's offline steps.
func TestWalkThroughs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds baectl, assistant and mcp-words and runs every documented step")
	}
	for _, bash := range []string{"bash", "curl", "jq"} {
		_, err := exec.LookPath(bash)
		require.NoError(t, err, "the walk-throughs need %s (scripts/test-deps.sh installs it)", bash)
	}
	root := repoRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	work := t.TempDir()
	bin := filepath.Join(work, "bin")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin+string(filepath.Separator),
		"./cmd/baectl", "./examples/assistant", "./examples/mcp-words")
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	fp := fakeprovider.New(t)
	fp.Respond(fakeprovider.Demo)
	devTOML, err := os.ReadFile(filepath.Join(root, "examples", "bae-config", "dev.toml"))
	require.NoError(t, err)
	cfg := string(devTOML)
	const docFake = "http://127.0.0.1:9999"
	require.Contains(t, cfg, docFake)
	require.Contains(t, cfg, `"bin/mcp-words"`)
	cfg = strings.ReplaceAll(cfg, docFake, fp.URL())
	cfg = strings.ReplaceAll(cfg, `"bin/mcp-words"`, strconv.Quote(filepath.Join(bin, "mcp-words")))
	data := filepath.Join(work, "bae-data")
	require.NoError(t, os.Mkdir(data, 0o700))
	srv := testenv.Start(t, testenv.Options{ConfigTOML: cfg, DataDir: data})

	admin := hostPort(t, srv.AdminURL)
	toTest := strings.NewReplacer(
		"http://127.0.0.1:8080", srv.ClientURL,
		"http://127.0.0.1:8081", srv.AdminURL,
	)
	toDoc := strings.NewReplacer(srv.ClientURL, "http://127.0.0.1:8080", srv.AdminURL, "http://127.0.0.1:8081", fp.URL(), docFake)
	binWord := regexp.MustCompile(`(^|[\s(])bin/`)
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + work, "LANG=C.UTF-8",
		// The defaults baectl, the SDK and the examples assume, pointed at
		// the test server. (BAE_ADDR stays unset: baectl quickstart then
		// prints the documented client URL, which is what a reader sees.)
		"BAE_ADMIN_ADDR=" + admin, "BAE_SERVER_URL=" + srv.ClientURL,
		"GOTOOLCHAIN=" + os.Getenv("GOTOOLCHAIN"),
	}

	for _, page := range []string{"README.md", filepath.Join("docs", "quickstart.md")} {
		t.Run(filepath.Base(page), func(t *testing.T) {
			blocks := parseBlocks(t, filepath.Join(root, page))
			var script strings.Builder
			script.WriteString("set -eo pipefail\n")
			var run []*block
			for _, bl := range blocks {
				if bl.lang != "sh" || bl.skip {
					continue
				}
				n := len(run)
				run = append(run, bl)
				body := toTest.Replace(bl.body)
				body = binWord.ReplaceAllString(body, "${1}"+bin+"/")
				f := filepath.Join(work, fmt.Sprintf("%s-%d.sh", filepath.Base(page), n))
				require.NoError(t, os.WriteFile(f, []byte(body+"\n"), 0o600))
				fmt.Fprintf(&script, "exec >%q 2>&1 </dev/null\n. %q\necho %d >>%q\n",
					f+".out", f, n, filepath.Join(work, filepath.Base(page)+".done"))
			}
			require.NotEmpty(t, run, "%s has no runnable block", page)
			cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
			cmd.Dir, cmd.Env = work, env
			runErr := cmd.Run()
			done, _ := os.ReadFile(filepath.Join(work, filepath.Base(page)+".done"))
			finished := len(strings.Fields(string(done)))
			for n, bl := range run {
				f := filepath.Join(work, fmt.Sprintf("%s-%d.sh.out", filepath.Base(page), n))
				got, _ := os.ReadFile(f)
				if n >= finished {
					require.FailNow(t, "a documented step failed",
						"%s:%d (%v):\n%s\noutput:\n%s", page, bl.line, runErr, bl.body, got)
				}
				if bl.output != nil {
					actual := toDoc.Replace(string(got))
					if !outputMatches(bl.output.body, actual) {
						t.Errorf("%s:%d: the output documented at line %d does not match what the step prints.\nstep:\n%s\ndocumented:\n%s\nprinted:\n%s",
							page, bl.line, bl.output.line, bl.body, bl.output.body, actual)
					}
				}
			}
			require.NoError(t, runErr)
		})
	}
}

func hostPort(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	return u.Host
}

var spaces = regexp.MustCompile(`[ \t]+`)

// outputMatches compares documented output with printed output: "…" in a
// line is any text, a line of only "…" any number of lines, and runs of
// spaces are one space.
func outputMatches(doc, got string) bool {
	norm := func(s string) []string {
		var out []string
		for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
			out = append(out, strings.TrimSpace(spaces.ReplaceAllString(l, " ")))
		}
		return out
	}
	var pat strings.Builder
	pat.WriteString(`(?s)\A`)
	for _, l := range norm(doc) {
		if l == "…" {
			pat.WriteString(`(?:[^\n]*\n)*?`)
			continue
		}
		for j, p := range strings.Split(l, "…") {
			if j > 0 {
				pat.WriteString(`[^\n]*?`)
			}
			pat.WriteString(regexp.QuoteMeta(p))
		}
		pat.WriteString(`\n`)
	}
	pat.WriteString(`\z`)
	return regexp.MustCompile(pat.String()).MatchString(strings.Join(norm(got), "\n") + "\n")
}
