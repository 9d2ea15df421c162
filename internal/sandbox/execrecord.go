package sandbox

// Exec records: how a command runs at most once per exec id.
//
// A tool call whose activity is retried (the server died mid-exec, the worker
// stopped) must not run its command a second time: the first run goes on in
// the container after its caller is gone. So ExecOnce does not run the
// command directly; it runs a small POSIX sh wrapper (execOnceScript) that
// keeps a record of the run under $TMPDIR/.bae-exec/<exec id>/ inside the
// container:
//
//	pid       the recorder process (a detached shell that runs the command)
//	out, err  the command's stdout and stderr, each capped at the output limit
//	out.n     total byte counts (and err.n), for the truncation notice
//	rc        the command's exit code, once it exited
//	timedout  present when the watchdog killed it at its timeout
//	result    written last (rename), once everything above is final
//	released  the caller stored the outcome; out and err were emptied
//
// The first call claims the id with mkdir (atomic), starts the recorder in
// the background and waits for it. Any later call finds the directory and
// collects instead: it polls for result, and reports the run lost when the
// recorder is gone without one. Both print one header line and then the
// recorded streams, which ExecOnce parses. The timeout is enforced by a
// watchdog inside the recorder, so it holds while no server is watching.
// Only sh, mkdir, mkfifo, mv, rm, cat, head -c, wc, tee, tr, grep, kill and
// sleep are used: tools busybox and coreutils both provide (head -c is the
// one option beyond POSIX).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
)

// execIDPattern bounds exec ids to what is safe as a path component and in
// the kill script's pattern.
var execIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,100}$`)

const (
	recordHeader = "bae-exec:1 "
	// collectGrace is how much longer than the timeout a collecting call
	// waits for the recorder (the kill and the capture need a moment).
	collectGrace = 60 * time.Second
	// onceBackstop is how long past the timeout ExecOnce waits for the
	// wrapper itself before giving up on it.
	onceBackstop = collectGrace + 30*time.Second
)

// recordLib is shared by the wrapper and the cancel script. It expects
// $id and $d (the record directory).
const recordLib = `
# kill_marked stops every process of the command, then kills them: killed
# one by one, a parent could run on for a moment after its child died.
kill_marked() {
	pids=
	for f in /proc/[0-9]*/environ; do
		if tr '\0' '\n' <"$f" 2>/dev/null | grep -qx "` + execMarkerEnv + `=$id"; then
			p=${f#/proc/}
			p=${p%/environ}
			kill -STOP "$p" 2>/dev/null && pids="$pids $p"
		fi
	done
	[ -z "$pids" ] || kill -KILL $pids 2>/dev/null
}
`

// execOnceScript is run as: sh -c execOnceScript bae-exec ID TIMEOUT LIMIT COMMAND.
const execOnceScript = `id=$1 t=$2 lim=$3 cmd=$4
root=${TMPDIR:-/tmp}/.bae-exec
d=$root/$id
claimed=0
` + recordLib + `
num() { set -- $(cat "$1" 2>/dev/null) 0; echo "$1"; }

# capture NAME: keeps the first $lim bytes of stdin in $d/NAME and counts
# all of them in $d/NAME.n, draining the rest so the command never blocks on
# a full pipe and the record never holds more than the cap.
capture() {
	{ head -c "$lim" >"$d/$1"; cat >/dev/null; } <"$d/$1.p" &
	tee "$d/$1.p" | wc -c >"$d/$1.n"
	wait
}

watchdog() {
	[ "$t" -gt 0 ] || return 0
	i=0
	while [ "$i" -lt "$t" ]; do
		[ -e "$d/result" ] && return 0
		sleep 1
		i=$((i + 1))
	done
	[ -e "$d/result" ] && return 0
	: >"$d/timedout"
	i=0
	while [ ! -e "$d/result" ] && [ "$i" -lt 30 ]; do
		kill_marked
		sleep 1
		i=$((i + 1))
	done
}

record() {
	watchdog &
	{ { ` + execMarkerEnv + `=$id sh -c "$cmd" 2>&1 1>&4 4>&-; echo $? >"$d/rc"; } | capture err 4>&-; } 4>&1 | capture out
	printf '%s %s %s\n' "$(num "$d/rc")" "$(num "$d/out.n")" "$(num "$d/err.n")" >"$d/result.t"
	mv "$d/result.t" "$d/result"
}

mkdir -p "$root" 2>/dev/null
if mkdir "$d" 2>/dev/null; then
	claimed=1
	if ! mkfifo "$d/out.p" "$d/err.p"; then
		# Nothing ran: give the claim back.
		rm -rf "$d"
		echo "bae-exec:1 error mkfifo failed in $d"
		exit 0
	fi
	exec 3<&0
	record 0<&3 3<&- >/dev/null 2>&1 &
	echo "$!" >"$d/pid"
	exec 3<&- 0</dev/null
	wait "$!"
elif [ ! -d "$d" ]; then
	echo "bae-exec:1 error cannot create $d"
	exit 0
else
	exec 0</dev/null
	per=1
	sleep 0.01 2>/dev/null && per=5
	max=0
	[ "$t" -gt 0 ] && max=$(( (t + ` + "COLLECT_GRACE" + `) * per ))
	n=0
	while [ ! -e "$d/result" ]; do
		if [ -s "$d/pid" ] && ! kill -0 "$(cat "$d/pid")" 2>/dev/null; then
			[ -e "$d/result" ] && break
			echo "bae-exec:1 lost stopped"
			exit 0
		fi
		if [ "$max" -gt 0 ] && [ "$n" -ge "$max" ]; then
			echo "bae-exec:1 lost overdue"
			exit 0
		fi
		if [ "$per" = 5 ]; then sleep 0.2; else sleep 1; fi
		n=$((n + 1))
	done
fi
if [ ! -e "$d/result" ]; then
	echo "bae-exec:1 lost stopped"
	exit 0
fi
if [ -e "$d/released" ]; then
	echo "bae-exec:1 released"
	exit 0
fi
set -- $(cat "$d/result")
to=0
[ -e "$d/timedout" ] && to=1
printf 'bae-exec:1 done %s %s %s %s %s\n' "$claimed" "$1" "$2" "$3" "$to"
cat "$d/out" 2>/dev/null
cat "$d/err" >&2
`

// cancelScript (sh -c cancelScript bae-exec ID) kills a recorded exec's
// processes until its record completes, for a few seconds at most.
const cancelScript = `id=$1
d=${TMPDIR:-/tmp}/.bae-exec/$id
[ -d "$d" ] || exit 0
` + recordLib + `
i=0
while [ ! -e "$d/result" ] && [ "$i" -lt 20 ]; do
	kill_marked
	sleep 0.2 2>/dev/null || sleep 1
	i=$((i + 1))
done
`

// releaseScript (sh -c releaseScript bae-exec ID) drops a record's output
// and keeps its claim.
const releaseScript = `d=${TMPDIR:-/tmp}/.bae-exec/$1
[ -d "$d" ] || exit 0
: >"$d/released"
: >"$d/out"
: >"$d/err"
`

func onceScript() string {
	return strings.Replace(execOnceScript, "COLLECT_GRACE", strconv.Itoa(int(collectGrace/time.Second)), 1)
}

// ExecOnce implements Driver.
func (d *DockerDriver) ExecOnce(ctx context.Context, id string, req ExecRequest) (ExecResult, error) {
	if !execIDPattern.MatchString(req.ID) {
		return ExecResult{}, fmt.Errorf("exec in sandbox %s: invalid exec id %q", id, req.ID)
	}
	secs := 0
	runCtx := ctx
	if req.Timeout > 0 {
		secs = int((req.Timeout + time.Second - 1) / time.Second)
		// A backstop for a wrapper that cannot enforce the timeout (its
		// processes killed from outside): ExecOnce never waits forever.
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, req.Timeout+onceBackstop)
		defer cancel()
	}
	cmd := []string{"sh", "-c", onceScript(), "bae-exec", req.ID, strconv.Itoa(secs), strconv.Itoa(d.outputLimit), req.Command}
	// Room for the header line.
	stdout, stderr, _, err := d.attachRun(runCtx, id, container.ExecOptions{Cmd: cmd}, req.Stdin, d.outputLimit+512, d.outputLimit, nil)
	if err != nil {
		if ctx.Err() == nil && runCtx.Err() != nil {
			// The backstop fired, not the caller: stop the command for good.
			if cerr := d.CancelExec(context.WithoutCancel(ctx), id, req.ID); cerr != nil {
				d.log.WarnContext(ctx, "cancel overdue sandbox exec", "container_id", id, "exec_id", req.ID, "error", cerr)
			}
			return ExecResult{}, fmt.Errorf("exec in sandbox %s: no outcome within %s of its timeout", id, onceBackstop)
		}
		return ExecResult{}, err
	}
	res, err := parseRecord(stdout.buf, stderr.buf, d.outputLimit)
	if err != nil {
		return ExecResult{}, fmt.Errorf("exec in sandbox %s: %w", id, err)
	}
	res.Timeout = req.Timeout
	if res.Collected {
		d.log.InfoContext(ctx, "sandbox exec collected from an earlier run", "container_id", id, "exec_id", req.ID)
	}
	return res, nil
}

// parseRecord turns the wrapper's output into an ExecResult.
func parseRecord(stdout, stderr []byte, limit int) (ExecResult, error) {
	line, body, found := bytes.Cut(stdout, []byte("\n"))
	if !found || !bytes.HasPrefix(line, []byte(recordHeader)) {
		return ExecResult{}, fmt.Errorf("exec wrapper failed (the image needs sh and the usual POSIX tools, and a writable /tmp): %s",
			strings.TrimSpace(firstBytes(string(stderr)+" "+string(stdout), 500)))
	}
	f := strings.Fields(string(line[len(recordHeader):]))
	switch {
	case len(f) >= 1 && f[0] == "lost":
		return ExecResult{}, ErrExecLost
	case len(f) >= 1 && f[0] == "released":
		return ExecResult{}, errors.New("the outcome of this exec was already collected and released")
	case len(f) >= 1 && f[0] == "error":
		return ExecResult{}, fmt.Errorf("exec record: %s", strings.Join(f[1:], " "))
	case len(f) != 6 || f[0] != "done":
		return ExecResult{}, fmt.Errorf("exec record: malformed header %q", line)
	}
	n := make([]int64, 5)
	for i, s := range f[1:] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return ExecResult{}, fmt.Errorf("exec record: malformed header %q", line)
		}
		n[i] = v
	}
	res := ExecResult{Collected: n[0] == 0, ExitCode: int(n[1]), TimedOut: n[4] == 1}
	var outCut, errCut bool
	res.Stdout, outCut = recordedStream(body, n[2], limit)
	res.Stderr, errCut = recordedStream(stderr, n[3], limit)
	res.Truncated = outCut || errCut
	return res, nil
}

// recordedStream renders a recorded stream of total bytes of which data is
// the kept head, with the truncation notice when anything was dropped.
func recordedStream(data []byte, total int64, limit int) (string, bool) {
	b := newCappedBuffer(limit)
	_, _ = b.Write(data)
	if rest := total - int64(len(b.buf)); rest > b.omitted {
		b.omitted = rest
	}
	return b.result()
}

func firstBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// CancelExec implements Driver.
func (d *DockerDriver) CancelExec(ctx context.Context, id, execID string) error {
	return d.recordScript(ctx, id, execID, cancelScript)
}

// ReleaseExec implements Driver.
func (d *DockerDriver) ReleaseExec(ctx context.Context, id, execID string) error {
	return d.recordScript(ctx, id, execID, releaseScript)
}

func (d *DockerDriver) recordScript(ctx context.Context, id, execID, script string) error {
	if !execIDPattern.MatchString(execID) {
		return fmt.Errorf("sandbox %s: invalid exec id %q", id, execID)
	}
	kctx, cancel := context.WithTimeout(ctx, killBudget+5*time.Second)
	defer cancel()
	if err := d.runQuiet(kctx, id, []string{"sh", "-c", script, "bae-exec", execID}); err != nil {
		return fmt.Errorf("sandbox %s: exec record %s: %w", id, execID, err)
	}
	return nil
}

// attachRun runs one engine exec to its end and returns its captured
// streams and exit code. When ctx ends first it closes the attachment and
// calls onCancel (when set) with the engine's exec id before returning
// ctx's error.
func (d *DockerDriver) attachRun(ctx context.Context, id string, opts container.ExecOptions, stdin io.Reader, outLimit, errLimit int, onCancel func(engineExecID string)) (*cappedBuffer, *cappedBuffer, int, error) {
	opts.AttachStdin = stdin != nil
	opts.AttachStdout, opts.AttachStderr = true, true
	created, err := d.cli.ContainerExecCreate(ctx, id, opts)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("exec in sandbox %s: %w", id, err)
	}
	att, err := d.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		if ctx.Err() != nil && onCancel != nil {
			// The start request may have reached the daemon. In the background:
			// if it did not, the clean-up waits out its whole budget.
			go onCancel(created.ID)
		}
		return nil, nil, 0, fmt.Errorf("exec in sandbox %s: attach: %w", id, err)
	}
	defer att.Close()

	stdout, stderr := newCappedBuffer(outLimit), newCappedBuffer(errLimit)
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(stdout, stderr, att.Reader)
		copied <- err
	}()
	if stdin != nil {
		// Fed concurrently with reading output: a command may fill its stdout
		// before consuming all of its input. Write errors only mean the
		// command exited (or we gave up) early.
		go func() {
			_, _ = io.Copy(att.Conn, stdin)
			_ = att.CloseWrite()
		}()
	}

	select {
	case err := <-copied:
		if err != nil {
			return nil, nil, 0, fmt.Errorf("exec in sandbox %s: read output: %w", id, err)
		}
	case <-ctx.Done():
		att.Close()
		<-copied // the closed connection ends the copy; buffers are ours again
		if onCancel != nil {
			onCancel(created.ID)
		}
		return nil, nil, 0, fmt.Errorf("exec in sandbox %s: %w", id, ctx.Err())
	}

	code, err := d.exitCode(ctx, created.ID)
	if err != nil {
		if ctx.Err() != nil && onCancel != nil {
			onCancel(created.ID)
		}
		return nil, nil, 0, fmt.Errorf("exec in sandbox %s: %w", id, err)
	}
	return stdout, stderr, code, nil
}
