package itest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
)

// TestExamples builds examples/assistant and examples/two-drivers and runs
// them against a real server.
func TestExamples(t *testing.T) {
	e := start(t)
	bin := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin+string(filepath.Separator), "../../examples/assistant", "../../examples/two-drivers")
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
}
