package sandbox

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCappedBuffer(t *testing.T) {
	t.Run("under the cap", func(t *testing.T) {
		b := newCappedBuffer(8)
		_, _ = b.Write([]byte("abc"))
		_, _ = b.Write([]byte("defgh"))
		s, cut := b.result()
		assert.False(t, cut)
		assert.Equal(t, "abcdefgh", s)
	})
	t.Run("over the cap across writes", func(t *testing.T) {
		b := newCappedBuffer(4)
		n, err := b.Write([]byte("abc"))
		require.NoError(t, err)
		assert.Equal(t, 3, n, "writes always report full consumption")
		n, _ = b.Write([]byte("defgh"))
		assert.Equal(t, 5, n)
		s, cut := b.result()
		assert.True(t, cut)
		assert.Equal(t, "abcd\n[output truncated: 4 bytes omitted]", s)
	})
	t.Run("never ends on half a character", func(t *testing.T) {
		b := newCappedBuffer(5)
		_, _ = b.Write([]byte("abcdé€")) // é is 2 bytes, € 3: the cap splits é
		s, cut := b.result()
		assert.True(t, cut)
		assert.Equal(t, "abcd\n[output truncated: 5 bytes omitted]", s)
		again, _ := b.result()
		assert.Equal(t, s, again, "result is stable")
	})
}

func TestDockerDriver(t *testing.T) {
	f := newEngineFixture(t)
	d := f.driver

	t.Run("EnsureImage present image", func(t *testing.T) {
		// The image exists only locally, so a pull attempt would fail:
		// success means inspect found it.
		require.NoError(t, d.EnsureImage(testCtx(t), f.image))
	})

	t.Run("EnsureImage missing image", func(t *testing.T) {
		// Port 1 on loopback refuses at once: a deterministic, offline pull
		// failure.
		missing := "127.0.0.1:1/bae-sandbox-test/missing:" + f.run
		err := d.EnsureImage(testCtx(t), missing)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "pull failed")
		assert.Contains(t, err.Error(), missing)
	})

	t.Run("Start from a missing image leaves nothing", func(t *testing.T) {
		missing := "bae-sandbox-test-missing:" + f.run
		_, err := d.Start(testCtx(t), missing, f.labels("ses_missing"), Policy{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "start sandbox from "+missing+": ")
		left, err := d.List(testCtx(t), LabelSession+"=ses_missing")
		require.NoError(t, err)
		assert.Empty(t, filterRun(left, f.run))
	})

	sid := "ses_" + f.run
	h := f.start(t, sid)
	assert.Equal(t, f.image, h.Image)
	assert.NotEmpty(t, h.ID)

	t.Run("labels and List", func(t *testing.T) {
		got, err := d.List(testCtx(t), LabelSession+"="+sid)
		require.NoError(t, err)
		require.Len(t, got, 1)
		assert.Equal(t, h.ID, got[0].ID)
		assert.Equal(t, f.image, got[0].Image)
		assert.Equal(t, "true", got[0].Labels[LabelManaged])
		assert.Equal(t, sid, got[0].Labels[LabelSession])

		_, err = d.List(testCtx(t), "")
		assert.Error(t, err, "an empty filter must not list the whole host")
	})

	t.Run("stdout stderr exit code", func(t *testing.T) {
		res, err := d.Exec(testCtx(t), h.ID, `echo out; echo err >&2; exit 3`, nil)
		require.NoError(t, err)
		assert.Equal(t, ExecResult{Stdout: "out\n", Stderr: "err\n", ExitCode: 3}, res)
	})

	t.Run("runs through sh -c", func(t *testing.T) {
		res, err := d.Exec(testCtx(t), h.ID, `x=42; printf '%s|' "$x" a 'b c'`, nil)
		require.NoError(t, err)
		assert.Equal(t, "42|a|b c|", res.Stdout)
		assert.Zero(t, res.ExitCode)
	})

	t.Run("no stdin means empty input", func(t *testing.T) {
		res, err := d.Exec(testCtx(t), h.ID, `cat; echo done`, nil)
		require.NoError(t, err)
		assert.Equal(t, "done\n", res.Stdout)
	})

	t.Run("stdin is piped", func(t *testing.T) {
		res, err := d.Exec(testCtx(t), h.ID, `cat`, strings.NewReader("a prompt\nwith lines\n"))
		require.NoError(t, err)
		assert.Equal(t, "a prompt\nwith lines\n", res.Stdout)
	})

	t.Run("large stdin while output flows", func(t *testing.T) {
		// Output is produced before all input is consumed: no deadlock.
		in := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
		res, err := d.Exec(testCtx(t), h.ID, `echo first; wc -c`, strings.NewReader(in))
		require.NoError(t, err)
		assert.Equal(t, "first\n1048576", strings.Join(strings.Fields(res.Stdout), "\n"))
	})

	t.Run("exec in a missing container", func(t *testing.T) {
		_, err := d.Exec(testCtx(t), "bae-no-such-container", "true", nil)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "exec in sandbox bae-no-such-container")
	})

	t.Run("cancellation returns promptly and kills the command", func(t *testing.T) {
		ctx, cancel := context.WithCancel(testCtx(t))
		defer cancel()
		// Exec reads stdin only once the exec is attached: cancel from there.
		stdin := &onFirstRead{fn: cancel}
		begin := time.Now()
		// A background and a foreground child: the whole tree must go.
		_, err := d.Exec(ctx, h.ID, `sleep 60 & sleep 60; wait`, stdin)
		require.ErrorIs(t, err, context.Canceled)
		assert.Less(t, time.Since(begin), 15*time.Second)
		assert.True(t, stdin.called())

		ps, err := d.Exec(testCtx(t), h.ID, `ps`, nil)
		require.NoError(t, err)
		assert.NotRegexp(t, `sleep 60\b`, ps.Stdout)
		assert.Contains(t, ps.Stdout, "sleep 3600", "ps output is meaningful")
	})

	t.Run("Stop removes the container", func(t *testing.T) {
		h2 := f.start(t, "ses_stop_"+f.run)
		require.NoError(t, d.Stop(testCtx(t), h2.ID))
		left, err := d.List(testCtx(t), LabelSession+"=ses_stop_"+f.run)
		require.NoError(t, err)
		assert.Empty(t, left)
		assert.NoError(t, d.Stop(testCtx(t), h2.ID), "stopping a gone container succeeds")
		_, err = d.Exec(testCtx(t), h2.ID, "true", nil)
		assert.Error(t, err)
	})
}

func TestDockerDriverTruncation(t *testing.T) {
	f := newEngineFixture(t, WithOutputLimit(16))
	h := f.start(t, "ses_trunc_"+f.run)

	res, err := f.driver.Exec(testCtx(t), h.ID, `printf abcdefghijklmnopqrstuvwxyz; printf 0123 >&2`, nil)
	require.NoError(t, err)
	assert.True(t, res.Truncated)
	assert.Equal(t, "abcdefghijklmnop\n[output truncated: 10 bytes omitted]", res.Stdout)
	assert.Equal(t, "0123", res.Stderr, "streams are capped independently")

	// A flood is drained (the command completes) while memory stays bounded.
	res, err = f.driver.Exec(testCtx(t), h.ID, `yes 0123456789 | head -c 3000000; echo tail >&2`, nil)
	require.NoError(t, err)
	assert.True(t, res.Truncated)
	assert.Equal(t, "0123456789\n01234\n[output truncated: 2999984 bytes omitted]", res.Stdout)
	assert.Equal(t, "tail\n", res.Stderr)
	assert.Zero(t, res.ExitCode)

	res, err = f.driver.Exec(testCtx(t), h.ID, `printf 0123456789abcdef`, nil)
	require.NoError(t, err)
	assert.False(t, res.Truncated, "exactly at the cap is not truncated")
	assert.Equal(t, "0123456789abcdef", res.Stdout)
}

func filterRun(cs []Container, run string) []Container {
	var out []Container
	for _, c := range cs {
		if c.Labels[labelTest] == run {
			out = append(out, c)
		}
	}
	return out
}

// onFirstRead calls fn on its first Read and then reports end of input.
type onFirstRead struct {
	once sync.Once
	fn   func()
	mu   sync.Mutex
	did  bool
}

func (r *onFirstRead) Read([]byte) (int, error) {
	r.once.Do(func() {
		r.mu.Lock()
		r.did = true
		r.mu.Unlock()
		r.fn()
	})
	return 0, io.EOF
}

func (r *onFirstRead) called() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.did
}
