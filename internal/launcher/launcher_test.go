package launcher

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/lib/childenv"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestResolveEnvRefs(t *testing.T) {
	look := env(map[string]string{"TOKEN": "s3cret", "EMPTY": ""})
	got, err := ResolveEnvRefs("Bearer ${TOKEN} costs $5 ${EMPTY}.", look)
	require.NoError(t, err)
	assert.Equal(t, "Bearer s3cret costs $5 .", got)

	_, err = ResolveEnvRefs("x ${UNSET} y", look)
	var me *MissingEnvError
	require.ErrorAs(t, err, &me, "an unset variable is never an empty value")
	assert.Equal(t, "UNSET", me.Var)

	_, err = ResolveEnvRefs("x ${TOKEN", look)
	var ue *UsageError
	require.ErrorAs(t, err, &ue)
	assert.NotContains(t, err.Error(), "TOKEN", "the message does not echo the value")
	assert.Equal(t, ExitUsage, ExitCode(err))
}

func TestCheckNames(t *testing.T) {
	require.NoError(t, CheckNames("f", []string{"a", "b"}))
	err := CheckNames("f", []string{"a", "a"})
	require.ErrorContains(t, err, `duplicate agent name "a"`)
	assert.Equal(t, ExitUsage, ExitCode(err))
	require.ErrorContains(t, CheckNames("f", []string{"a", "  "}), "agent 2 has an empty name")
}

func TestDecodeConfigRefusesUnknownFields(t *testing.T) {
	var v struct {
		Agents []struct {
			Name   string         `toml:"name"`
			Schema map[string]any `toml:"schema"`
		} `toml:"agents"`
	}
	err := DecodeConfig("x.toml", []byte("[agent]\nname = \"a\"\n"), &v)
	require.EqualError(t, err, "x.toml: unknown field(s) agent, agent.name")
	assert.Equal(t, ExitUsage, ExitCode(err))
	require.NoError(t, DecodeConfig("x.toml", []byte("[[agents]]\nname = \"a\"\n[agents.schema]\ntype = \"object\"\n"), &v, "agents.schema"))
	err = DecodeConfig("x.toml", []byte("[[agents]\n"), &v)
	require.ErrorContains(t, err, "x.toml: toml: line 2")
	assert.Equal(t, ExitUsage, ExitCode(err))
	assert.EqualError(t, Prefixed(err, "malformed config: "), "malformed config: "+err.Error())

	_, found, err := ReadFile(filepath.Join(t.TempDir(), "missing.toml"))
	require.NoError(t, err)
	assert.False(t, found, "a missing file is no error")
}

func collect(t *testing.T, spec Spec) ([]Line, Exit) {
	t.Helper()
	var lines []Line
	exit, err := Run(context.Background(), spec, func(l Line) { lines = append(lines, l) })
	require.NoError(t, err)
	return lines, exit
}

func TestRunPrefixesAndCapsLines(t *testing.T) {
	long := strings.Repeat("é", MaxLineLen+10)
	lines, exit := collect(t, Spec{Name: "echoer", Command: "sh", Args: []string{"-c", `echo out; echo err >&2; printf '%s\n' "$LONG"; printf 'no newline'; exit 3`}, Env: map[string]string{"LONG": long}})
	require.NotNil(t, exit.ExitCode)
	assert.Equal(t, 3, *exit.ExitCode)
	require.Len(t, lines, 4)
	assert.Contains(t, lines, Line{Stream: Stdout, Text: "[echoer] out"})
	assert.Contains(t, lines, Line{Stream: Stderr, Text: "[echoer] err"})
	var capped string
	for _, l := range lines {
		if strings.HasPrefix(l.Text, "[echoer] éé") {
			capped = l.Text
		}
	}
	assert.Equal(t, "[echoer] "+strings.Repeat("é", MaxLineLen)+"…", capped)
	assert.Contains(t, lines, Line{Stream: Stdout, Text: "[echoer] no newline"})
}

func TestRunReportsSignalAndSpawnFailure(t *testing.T) {
	_, exit := collect(t, Spec{Name: "s", Command: "sh", Args: []string{"-c", "kill -9 $$"}})
	assert.Nil(t, exit.ExitCode, "a signal is no exit code")

	_, err := Run(context.Background(), Spec{Name: "bad", Command: "/nonexistent/harness"}, func(Line) {})
	var se *SpawnError
	require.ErrorAs(t, err, &se)
}

func TestRunKillsTheProcessGroupWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pid := make(chan string, 1)
	done := make(chan Exit, 1)
	go func() {
		// The shell prints its background child's pid; that grandchild
		// must die with it.
		exit, _ := Run(ctx, Spec{Name: "hung", Command: "sh", Args: []string{"-c", `sleep 300 & echo "$!"; wait`}},
			func(l Line) { pid <- strings.TrimPrefix(l.Text, "[hung] ") })
		done <- exit
	}()
	grandchild := <-pid
	cancel()
	exit := <-done
	assert.Nil(t, exit.ExitCode)
	require.Eventually(t, func() bool {
		stat, err := os.ReadFile("/proc/" + grandchild + "/stat")
		return err != nil || strings.Contains(string(stat), ") Z ")
	}, 10*time.Second, 20*time.Millisecond, "the grandchild outlived the kill")
}

// A child sees PATH, HOME, TMPDIR, TZ, the locale and its own env, never the
// rest of the launcher's environment: the launcher's token, the database URL
// and another agent's key stay out of it.
func TestRunGivesTheChildOnlyItsOwnEnvironment(t *testing.T) {
	secrets := map[string]string{
		"BAE_LAUNCHER_API_TOKEN": "launcher-token-secret",
		"BAE_DATABASE_URL":       "postgres://bae:db-secret@db/bae",
		"OTHER_AGENT_KEY":        "other-agent-secret",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	t.Setenv("TZ", "Europe/Paris")
	t.Setenv("LC_ALL", "C.UTF-8")
	t.Setenv("HOME", "/home/launcher")
	lines, exit := collect(t, Spec{Name: "env", Command: "env", Env: map[string]string{"OWN_KEY": "own-value", "HOME": "/srv/agent"}})
	require.NotNil(t, exit.ExitCode)
	got := map[string]string{}
	for _, l := range lines {
		k, v, _ := strings.Cut(strings.TrimPrefix(l.Text, "[env] "), "=")
		got[k] = v
	}
	for k, v := range secrets {
		assert.NotContains(t, got, k)
		for name, value := range got {
			assert.NotContains(t, value, v, "%s carries %s's value", name, k)
		}
	}
	assert.Equal(t, os.Getenv("PATH"), got["PATH"])
	assert.Equal(t, "Europe/Paris", got["TZ"])
	assert.Equal(t, "C.UTF-8", got["LC_ALL"])
	assert.Equal(t, "/srv/agent", got["HOME"], "the agent's own env wins")
	assert.Equal(t, "own-value", got["OWN_KEY"])
	for k := range got {
		assert.True(t, k == "OWN_KEY" || childenv.Inherited(k), "%s reached the child", k)
	}
}

// A line longer than the cap is emitted, capped, as soon as the cap is
// reached, while the child is still writing it (BAE does the same): here
// the child writes 256 KiB without a newline and then waits for a gate the
// test opens only once it has seen the capped line.
func TestRunEmitsACappedLineWhileTheChildStillWrites(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "gate")
	lines := make(chan Line, 16)
	done := make(chan Exit, 1)
	go func() {
		exit, err := Run(context.Background(), Spec{Name: "big", Command: "sh", Args: []string{"-c",
			`head -c 262144 /dev/zero | tr '\0' x; while [ ! -e "$GATE" ]; do sleep 0.05; done; echo; echo tail`},
			Env: map[string]string{"GATE": gate}}, func(l Line) { lines <- l })
		assert.NoError(t, err)
		close(lines)
		done <- exit
	}()
	select {
	case l := <-lines:
		assert.Equal(t, Line{Stream: Stdout, Text: "[big] " + strings.Repeat("x", MaxLineLen) + "…"}, l)
	case <-done:
		t.Fatal("the child exited before its capped line was seen")
	case <-time.After(30 * time.Second):
		t.Fatal("no capped line while the child was still writing it")
	}
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	var rest []Line
	for l := range lines {
		rest = append(rest, l)
	}
	exit := <-done
	require.NotNil(t, exit.ExitCode)
	assert.Equal(t, 0, *exit.ExitCode)
	assert.Equal(t, []Line{{Stream: Stdout, Text: "[big] tail"}}, rest, "the rest of the long line is dropped")
}

func TestReadLinesCapsByCharacters(t *testing.T) {
	var got []string
	// A line of exactly MaxLineLen characters is whole; one more is cut; a
	// multi-byte character split across reads is counted once.
	exact := strings.Repeat("é", MaxLineLen)
	readLines(io.MultiReader(strings.NewReader(exact[:5]), strings.NewReader(exact[5:]+"\r\n"), strings.NewReader(exact+"é!\nlast")),
		func(s string) { got = append(got, s) })
	require.Len(t, got, 3)
	assert.Equal(t, exact, got[0])
	assert.Equal(t, exact+"…", got[1])
	assert.Equal(t, "last", got[2])
}

// The launchers' text log writes a message as it is, so BAE's quoted words
// can be grepped for; attributes follow as key=value, one record per line.
func TestLoggerWritesMessagesAsBAEDoes(t *testing.T) {
	var b strings.Builder
	log := NewLogger(&b, config.Log{Level: slog.LevelInfo}).With("component", "x")
	log.Warn(`agent "nightly" skipped: previous invocation still running`, "agent", "nightly")
	log.Debug("hidden")
	log.Info("two\nlines", "err", "a b")
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	require.Len(t, lines, 2, b.String())
	assert.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z WARN agent "nightly" skipped: previous invocation still running component=x agent=nightly$`, lines[0])
	assert.Regexp(t, `Z INFO two\\nlines component=x err="a b"$`, lines[1])

	b.Reset()
	NewLogger(&b, config.Log{Level: slog.LevelInfo, JSON: true}).Warn(`agent "a" skipped`)
	assert.Contains(t, b.String(), `"msg":"agent \"a\" skipped"`)
}
