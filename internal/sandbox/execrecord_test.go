package sandbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lines runs command and returns its stdout split in lines.
func lines(t *testing.T, d *DockerDriver, id, command string) []string {
	t.Helper()
	res, err := d.Exec(testCtx(t), id, command, nil)
	require.NoError(t, err)
	return strings.Fields(res.Stdout)
}

// waitLines polls file in the container until it holds n lines.
func waitLines(t *testing.T, d *DockerDriver, id, file string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		return len(lines(t, d, id, "cat "+file+" 2>/dev/null")) == n
	}, 20*time.Second, 50*time.Millisecond)
}

// TestExecOnceInterruptedAttempt is the crash-retry case: a first call
// starts the command and is abandoned mid-run (its caller died); a second
// call with the same exec id must collect the first run, not start one.
func TestExecOnceInterruptedAttempt(t *testing.T) {
	f := newEngineFixture(t)
	d := f.driver
	h := f.start(t, "ses_once_"+f.run)
	const cmd = `echo run >>/tmp/counter; until [ -e /tmp/go ]; do sleep 0.1; done; echo first-run-output; echo on-stderr >&2; exit 3`

	ctx, cancel := context.WithCancel(testCtx(t))
	first := make(chan error, 1)
	go func() {
		_, err := d.ExecOnce(ctx, h.ID, ExecRequest{ID: "x1", Command: cmd, Timeout: time.Minute})
		first <- err
	}()
	waitLines(t, d, h.ID, "/tmp/counter", 1)
	cancel() // the first caller is gone; the command is still running
	require.ErrorIs(t, <-first, context.Canceled)

	second := make(chan ExecResult, 1)
	go func() {
		res, err := d.ExecOnce(testCtx(t), h.ID, ExecRequest{ID: "x1", Command: cmd, Timeout: time.Minute})
		assert.NoError(t, err)
		second <- res
	}()
	// The retry waits for the first run while it still runs.
	select {
	case res := <-second:
		t.Fatalf("the retry returned before the first run finished: %+v", res)
	case <-time.After(500 * time.Millisecond):
	}
	_, err := d.Exec(testCtx(t), h.ID, "touch /tmp/go", nil)
	require.NoError(t, err)
	res := <-second
	assert.Equal(t, ExecResult{Stdout: "first-run-output\n", Stderr: "on-stderr\n", ExitCode: 3, Collected: true, Timeout: time.Minute}, res)
	assert.Equal(t, []string{"run"}, lines(t, d, h.ID, "cat /tmp/counter"), "the command ran exactly once")

	// Once finished, every further call returns the same outcome.
	again, err := d.ExecOnce(testCtx(t), h.ID, ExecRequest{ID: "x1", Command: cmd, Timeout: time.Minute})
	require.NoError(t, err)
	assert.Equal(t, res, again)
	assert.Equal(t, []string{"run"}, lines(t, d, h.ID, "cat /tmp/counter"))

	// Another id is another run.
	other, err := d.ExecOnce(testCtx(t), h.ID, ExecRequest{ID: "x2", Command: cmd, Timeout: time.Minute})
	require.NoError(t, err)
	assert.False(t, other.Collected)
	assert.Equal(t, []string{"run", "run"}, lines(t, d, h.ID, "cat /tmp/counter"))
}

func TestExecOnce(t *testing.T) {
	f := newEngineFixture(t)
	d := f.driver
	h := f.start(t, "ses_once2_"+f.run)
	run := func(t *testing.T, req ExecRequest) (ExecResult, error) {
		t.Helper()
		if req.Timeout == 0 {
			req.Timeout = time.Minute
		}
		return d.ExecOnce(testCtx(t), h.ID, req)
	}

	t.Run("streams, exit code and stdin", func(t *testing.T) {
		res, err := run(t, ExecRequest{ID: "s1", Command: `x=42; printf '%s|' "$x" 'b c'; cat; echo err >&2`, Stdin: strings.NewReader("in\n")})
		require.NoError(t, err)
		assert.Equal(t, ExecResult{Stdout: "42|b c|in\n", Stderr: "err\n", Timeout: time.Minute}, res)
	})

	t.Run("the command's own stdin is not the wrapper's", func(t *testing.T) {
		res, err := run(t, ExecRequest{ID: "s2", Command: `cat; echo done`})
		require.NoError(t, err)
		assert.Equal(t, "done\n", res.Stdout)
	})

	t.Run("timeout kills the command and says so", func(t *testing.T) {
		begin := time.Now()
		res, err := run(t, ExecRequest{ID: "t1", Command: `echo started; sleep 45 & sleep 46; echo never`, Timeout: 2 * time.Second})
		require.NoError(t, err)
		assert.True(t, res.TimedOut)
		assert.Equal(t, "started\n", res.Stdout)
		assert.NotZero(t, res.ExitCode)
		assert.Less(t, time.Since(begin), 20*time.Second)
		ps := strings.Join(lines(t, d, h.ID, "ps -o args"), " ")
		assert.NotContains(t, ps, "sleep 45", "the background child is killed too")
		assert.NotContains(t, ps, "sleep 46")

		again, err := run(t, ExecRequest{ID: "t1", Command: "true", Timeout: 2 * time.Second})
		require.NoError(t, err)
		assert.True(t, again.TimedOut, "a collecting call reports the timeout too")
		assert.True(t, again.Collected)
	})

	t.Run("no timeout when the command is quicker", func(t *testing.T) {
		res, err := run(t, ExecRequest{ID: "t2", Command: `sleep 1; echo ok`, Timeout: 3 * time.Second})
		require.NoError(t, err)
		assert.False(t, res.TimedOut)
		assert.Equal(t, "ok\n", res.Stdout)
	})

	t.Run("CancelExec kills a running record", func(t *testing.T) {
		got := make(chan ExecResult, 1)
		go func() {
			res, err := run(t, ExecRequest{ID: "c1", Command: `echo up >/tmp/c1; sleep 50; echo never`})
			assert.NoError(t, err)
			got <- res
		}()
		waitLines(t, d, h.ID, "/tmp/c1", 1)
		require.NoError(t, d.CancelExec(testCtx(t), h.ID, "c1"))
		res := <-got
		assert.Equal(t, 137, res.ExitCode)
		assert.NotContains(t, res.Stdout, "never")
		require.NoError(t, d.CancelExec(testCtx(t), h.ID, "never-started"), "cancelling an unknown id is a no-op")
	})

	t.Run("a run killed from outside is lost, never run again", func(t *testing.T) {
		go func() { _, _ = run(t, ExecRequest{ID: "l1", Command: `echo run >>/tmp/l1; sleep 50`}) }()
		waitLines(t, d, h.ID, "/tmp/l1", 1)
		// Kill the recorder and the command, as a container restart would.
		_, err := d.Exec(testCtx(t), h.ID, `kill -9 $(cat /tmp/.bae-exec/l1/pid); for p in /proc/[0-9]*; do `+
			`if tr '\0' ' ' <$p/cmdline 2>/dev/null | grep -q '^sleep 50'; then kill -9 ${p#/proc/}; fi; done`, nil)
		require.NoError(t, err)
		_, err = run(t, ExecRequest{ID: "l1", Command: `echo run >>/tmp/l1`})
		require.ErrorIs(t, err, ErrExecLost)
		assert.Equal(t, []string{"run"}, lines(t, d, h.ID, "cat /tmp/l1"))
	})

	t.Run("released records keep their claim", func(t *testing.T) {
		_, err := run(t, ExecRequest{ID: "r1", Command: `echo run >>/tmp/r1`})
		require.NoError(t, err)
		require.NoError(t, d.ReleaseExec(testCtx(t), h.ID, "r1"))
		_, err = run(t, ExecRequest{ID: "r1", Command: `echo run >>/tmp/r1`})
		require.Error(t, err)
		assert.Equal(t, []string{"run"}, lines(t, d, h.ID, "cat /tmp/r1"))
	})

	t.Run("invalid ids are refused", func(t *testing.T) {
		for _, id := range []string{"", "../x", "a b", strings.Repeat("a", 101)} {
			_, err := run(t, ExecRequest{ID: id, Command: "true"})
			assert.Error(t, err, id)
		}
	})

	t.Run("a missing shell is a clear error", func(t *testing.T) {
		_, err := d.ExecOnce(testCtx(t), "bae-no-such-container", ExecRequest{ID: "m1", Command: "true"})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "exec in sandbox bae-no-such-container")
	})
}

func TestExecOnceTruncation(t *testing.T) {
	f := newEngineFixture(t, WithOutputLimit(16))
	d := f.driver
	h := f.start(t, "ses_trunc_"+f.run)
	run := func(id, command string) ExecResult {
		t.Helper()
		res, err := d.ExecOnce(testCtx(t), h.ID, ExecRequest{ID: id, Command: command, Timeout: time.Minute})
		require.NoError(t, err)
		return res
	}

	res := run("big", `printf abcdefghijklmnopqrstuvwxyz; printf 0123 >&2`)
	assert.True(t, res.Truncated)
	assert.Equal(t, "abcdefghijklmnop\n[output truncated: 10 bytes omitted]", res.Stdout)
	assert.Equal(t, "0123", res.Stderr, "streams are capped independently")
	collected := res
	collected.Collected = true
	assert.Equal(t, collected, run("big", "true"), "a collecting call gets the same notice")

	// A flood is drained (the command completes) and only its head is kept
	// on the container's disk.
	res = run("flood", `yes 0123456789 | head -c 3000000; yes e | head -c 100000 >&2; echo tail`)
	assert.True(t, res.Truncated)
	assert.Zero(t, res.ExitCode)
	assert.Equal(t, "0123456789\n01234\n[output truncated: 2999989 bytes omitted]", res.Stdout)
	assert.Equal(t, "e\ne\ne\ne\ne\ne\ne\ne\n\n[output truncated: 99984 bytes omitted]", res.Stderr)
	assert.Equal(t, []string{"16", "16"}, lines(t, d, h.ID, "wc -c </tmp/.bae-exec/flood/out; wc -c </tmp/.bae-exec/flood/err"))

	res = run("exact", `printf 0123456789abcdef`)
	assert.False(t, res.Truncated, "exactly at the cap is not truncated")
	assert.Equal(t, "0123456789abcdef", res.Stdout)
}
