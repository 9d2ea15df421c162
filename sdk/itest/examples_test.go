package itest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/launcher/trigger"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
)

// TestExamples builds examples/assistant, examples/two-drivers and the
// launchers' harness and runs them against a real server.
func TestExamples(t *testing.T) {
	e := start(t)
	bin := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin+string(filepath.Separator), "../../examples/assistant", "../../examples/two-drivers", "../../examples/launchers/ask")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	runBin := func(t *testing.T, env []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, filepath.Join(bin, name), args...)
		cmd.Env = append(os.Environ(), append(env, "BAE_SERVER_URL="+e.srv.ClientURL)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		stdout, err := cmd.Output()
		require.NoError(t, err, "stderr:\n%s", stderr.String())
		return string(stdout)
	}

	t.Run("assistant", func(t *testing.T) {
		_, key := e.srv.Key(t, e.profile(t, "misc", "get_current_time"))
		lane := e.fake.Lane("misc")
		lane.Enqueue(fakeprovider.ToolUse("tu_1", "get_current_time", map[string]any{"timezone": "UTC"}), fakeprovider.Text("It is now."))
		before := e.fake.RequestCount()
		out := runBin(t, []string{"BAE_CLIENT_KEY=" + key}, "assistant", "-prompt", "What time is it?")
		assert.Equal(t, "It is now.\n", out)
		reqs := e.fake.Requests()[before:]
		require.Len(t, reqs, 2)
		result := lastMessage(reqs[1])["content"].([]any)[0].(map[string]any)
		assert.Equal(t, "tu_1", result["tool_use_id"])
		assert.Contains(t, result["content"].([]any)[0].(map[string]any)["text"], time.Now().UTC().Format("2006-01-02"))
	})

	t.Run("two-drivers", func(t *testing.T) {
		pid := e.profile(t, "misc")
		_, keyA := e.srv.Key(t, pid)
		_, keyB := e.srv.Key(t, pid)
		out := runBin(t, []string{"BAE_CLIENT_KEY=" + keyA, "BAE_CLIENT_KEY_B=" + keyB}, "two-drivers")
		assert.Contains(t, out, "echo: Say hello from A.")
		assert.Contains(t, out, "echo: Say hello from B.")
		assert.Contains(t, out, "[observer] B  server → client: assistant turn")
		order := out[strings.Index(out, "turn order"):]
		var turns [][]string // [driver, event type]
		for _, line := range strings.Split(order, "\n")[1:] {
			if f := strings.Fields(line); len(f) == 2 {
				turns = append(turns, f)
			}
		}
		require.Len(t, turns, 4, order)
		assert.Equal(t, []string{"client.message.send", "server.message.send", "client.message.send", "server.message.send"},
			[]string{turns[0][1], turns[1][1], turns[2][1], turns[3][1]}, order)
		assert.Equal(t, turns[0][0], turns[1][0], "one driver's turn completes before the other's starts: %s", order)
		assert.Equal(t, turns[2][0], turns[3][0], order)
		assert.ElementsMatch(t, []string{"A", "B"}, []string{turns[0][0], turns[2][0]}, order)
	})
	t.Run("launchers", func(t *testing.T) {
		// examples/launchers/bae-api.toml as written, with the harness at its
		// built path, run by baeapi on the server's Temporal.
		toml, err := os.ReadFile("../../examples/launchers/bae-api.toml")
		require.NoError(t, err)
		require.Contains(t, string(toml), `command = "ask"`)
		cfg := filepath.Join(t.TempDir(), "bae-api.toml")
		require.NoError(t, os.WriteFile(cfg, []byte(strings.Replace(string(toml), `command = "ask"`, "command = "+strconv.Quote(filepath.Join(bin, "ask")), 1)), 0o600))
		_, key := e.srv.Key(t, e.profile(t, "misc"))
		e.fake.Lane("misc").Enqueue(fakeprovider.Text("Paris."))
		launcherEnv := map[string]string{"ASK_CLIENT_KEY": key, "ASK_SERVER_URL": e.srv.ClientURL}
		var logs strings.Builder
		addr := make(chan string, 1)
		lctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- trigger.Run(lctx, trigger.Options{
				ConfigPath: cfg, Addr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second,
				Client: e.srv.Temporal, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				Stdout: &strings.Builder{}, Stderr: &logs,
				Lookup:    func(k string) (string, bool) { v, ok := launcherEnv[k]; return v, ok },
				Listening: func(a string) { addr <- a },
			})
		}()
		defer func() { stop(); require.NoError(t, <-done) }()
		var url string
		select {
		case a := <-addr:
			url = "http://" + a
		case err := <-done:
			t.Fatalf("baeapi did not start: %v", err)
		}
		resp, err := http.Post(url+"/agents/ask/trigger", "application/json", strings.NewReader(`{"prompt":"What is the capital of France?"}`))
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		assert.Equal(t, "[ask] Paris.\n{\"exit_code\":0}\n", string(body))
		last := e.fake.Requests()
		require.NotEmpty(t, last)
		assert.Contains(t, fmt.Sprint(lastMessage(last[len(last)-1])), "What is the capital of France?")
	})
}
