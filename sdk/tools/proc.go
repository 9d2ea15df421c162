package tools

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"time"

	"github.com/bae-go/bae-go/sdk"
)

// cappedBuffer keeps at most limit+1 bytes (the extra byte flags the
// truncation) while still draining everything the process writes.
type cappedBuffer struct {
	buf   bytes.Buffer
	limit int // <= 0: unlimited
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if c.limit <= 0 {
		return c.buf.Write(p)
	}
	if room := c.limit + 1 - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// procResult is a finished process.
type procResult struct {
	sdk.ExecResult
	stdoutOver, stderrOver bool // more than the limit was written
}

// runProcess runs name with args to completion, feeding stdin when non-nil
// and keeping up to limit bytes of each stream (limit <= 0: all). A non-zero
// exit is a result; the error is for a process that could not start, or
// ctx ending first (then ctx.Err()).
func runProcess(ctx context.Context, stdin []byte, limit int, name string, args ...string) (procResult, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr = &cappedBuffer{limit: limit}, &cappedBuffer{limit: limit}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	killGroup(cmd)
	// A grandchild holding the pipes open must not keep Wait blocked after
	// the process itself was killed.
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	if cerr := ctx.Err(); cerr != nil {
		return procResult{}, cerr
	}
	res := procResult{ExecResult: sdk.ExecResult{Stdout: stdout.buf.String(), Stderr: stderr.buf.String()}}
	res.stdoutOver = limit > 0 && stdout.buf.Len() > limit
	res.stderrOver = limit > 0 && stderr.buf.Len() > limit
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		res.ExitCode = exitErr.ExitCode() // -1 when killed by a signal
	case err != nil:
		return procResult{}, err
	}
	return res, nil
}
