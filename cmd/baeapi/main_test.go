package main

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/testenv"
	"github.com/bae-go/bae-go/internal/testing/testlog"
)

func lookupOf(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

// Exit codes decided before Temporal is dialled (BAE_TEMPORAL_ADDR points
// nowhere, so reaching the dial would be exit 1 for the wrong reason).
func TestExitCodesBeforeTemporal(t *testing.T) {
	good := writeFile(t, "bae-api.toml", "[[agents]]\nname = \"a\"\ncommand = \"true\"\n")
	for name, tc := range map[string]struct {
		env  map[string]string
		code int
		says string
	}{
		// BAE's words first ("malformed config"), then which file and why.
		"singular agent table":  {map[string]string{"BAE_LAUNCHER_API_CONFIG": writeFile(t, "x.toml", "[agent]\nname = \"a\"\n")}, 2, "malformed config: "},
		"unknown top-level key": {map[string]string{"BAE_LAUNCHER_API_CONFIG": writeFile(t, "x.toml", "[[agnts]]\nname = \"a\"\ncommand = \"true\"\n")}, 2, "malformed config: "},
		"bad toml": {map[string]string{"BAE_LAUNCHER_API_CONFIG": writeFile(t, "x.toml",
			"[[agents]]\nname = \"a\"\n\n\ncommand = [not valid\n")}, 2, "malformed config: "},
		"wrong type": {map[string]string{"BAE_LAUNCHER_API_CONFIG": writeFile(t, "x.toml", "[[agents]]\nname = 5\ncommand = \"true\"\n")}, 2, "malformed config: "},
		"duplicate name": {map[string]string{"BAE_LAUNCHER_API_CONFIG": writeFile(t, "x.toml",
			"[[agents]]\nname = \"a\"\ncommand = \"true\"\n[[agents]]\nname = \"a\"\ncommand = \"true\"\n")}, 2, `duplicate agent name "a"`},
		"bad schema": {map[string]string{"BAE_LAUNCHER_API_CONFIG": writeFile(t, "x.toml",
			"[[agents]]\nname = \"a\"\ncommand = \"true\"\n[agents.request_schema]\ntype = 5\n")}, 2, `agent "a" has an invalid request_schema`},
		"timeout not a number": {map[string]string{"BAE_LAUNCHER_API_CONFIG": good, "BAE_LAUNCHER_API_SHUTDOWN_TIMEOUT": "1.5"}, 2, "BAE_LAUNCHER_API_SHUTDOWN_TIMEOUT"},
		"timeout negative":     {map[string]string{"BAE_LAUNCHER_API_CONFIG": good, "BAE_LAUNCHER_API_SHUTDOWN_TIMEOUT": "-1"}, 2, "BAE_LAUNCHER_API_SHUTDOWN_TIMEOUT"},
		// A file that exists but cannot be read is exit 1 for baeapi, as in BAE.
		"unreadable config": {map[string]string{"BAE_LAUNCHER_API_CONFIG": t.TempDir()}, 1, "cannot read config file"},
		"extra argument":    {map[string]string{"BAE_LAUNCHER_API_CONFIG": good, "ARGS": "x"}, 2, ""},
	} {
		t.Run(name, func(t *testing.T) {
			tc.env["BAE_TEMPORAL_ADDR"] = "127.0.0.1:1"
			var args []string
			if a := tc.env["ARGS"]; a != "" {
				args = []string{a}
			}
			var stdout, stderr strings.Builder
			code := execute(context.Background(), args, lookupOf(tc.env), &stdout, &stderr)
			assert.Equal(t, tc.code, code, stderr.String())
			assert.Contains(t, stderr.String(), tc.says)
			assert.NotContains(t, stderr.String(), "connect to temporal")
		})
	}
	// The TOML error keeps its detail after BAE's words: the file and line.
	path := writeFile(t, "bad.toml", "[[agents]]\nname = \"a\"\n\n\ncommand = [not valid\n")
	var stderr strings.Builder
	require.Equal(t, 2, execute(context.Background(), nil, lookupOf(map[string]string{"BAE_LAUNCHER_API_CONFIG": path, "BAE_TEMPORAL_ADDR": "127.0.0.1:1"}), &strings.Builder{}, &stderr))
	assert.Contains(t, stderr.String(), "baeapi: malformed config: "+path+": toml: line 5")
}

// apiRun is baeapi run through execute against an embedded Temporal.
type apiRun struct {
	url    string
	stderr *testlog.Buffer
	stop   context.CancelFunc
	code   chan int
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func startBaeapi(t *testing.T, env map[string]string) *apiRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &apiRun{stderr: &testlog.Buffer{}, stop: cancel, code: make(chan int, 1)}
	if env["BAE_LAUNCHER_API_ADDR"] == "" {
		env["BAE_LAUNCHER_API_ADDR"] = freeAddr(t)
	}
	r.url = "http://" + env["BAE_LAUNCHER_API_ADDR"]
	go func() { r.code <- execute(ctx, nil, lookupOf(env), &testlog.Buffer{}, r.stderr) }()
	t.Cleanup(cancel)
	return r
}

func (r *apiRun) waitHealthy(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		select {
		case code := <-r.code:
			r.code <- code
			return true
		default:
		}
		resp, err := http.Get(r.url + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 60*time.Second, 50*time.Millisecond)
	select {
	case code := <-r.code:
		t.Fatalf("baeapi exited %d: %s", code, r.stderr.String())
	default:
	}
}

// hungTOML runs a child that writes its pid to $PIDFILE, says so, and then
// hangs.
const hungTOML = `
[[agents]]
name = "hung"
command = "sh"
args = ["-c", "echo $$ > \"$PIDFILE\"; echo started; exec sleep 600"]
[[agents.env_template]]
field = "pidfile"
env = "PIDFILE"
`

// triggerHung starts the hung agent and returns its response (past its
// first line) and the child's pid.
func triggerHung(t *testing.T, ctx context.Context, url string) (*http.Response, int) {
	t.Helper()
	pidfile := filepath.Join(t.TempDir(), "pid")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/agents/hung/trigger", strings.NewReader(`{"pidfile":"`+pidfile+`"}`))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "[hung] started\n", line)
	b, err := os.ReadFile(pidfile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(pid, 0), "the child runs")
	return resp, pid
}

func gone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }

func TestBaeapiOnTemporal(t *testing.T) {
	ts := testenv.Temporal(t)
	temporal := func(env map[string]string) map[string]string {
		env["BAE_TEMPORAL_ADDR"] = ts.GetFrontendHostPort()
		env["BAE_TEMPORAL_NAMESPACE"] = ts.GetDefaultNamespace()
		return env
	}

	t.Run("missing config runs with zero agents and a warning", func(t *testing.T) {
		r := startBaeapi(t, temporal(map[string]string{"BAE_LAUNCHER_API_CONFIG": filepath.Join(t.TempDir(), "absent.toml")}))
		r.waitHealthy(t)
		resp, err := http.Get(r.url + "/_launcher/agents")
		require.NoError(t, err)
		var body strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&body)
		resp.Body.Close()
		assert.JSONEq(t, `[]`, body.String())
		assert.Contains(t, r.stderr.String(), "no config file found")
		assert.Contains(t, r.stderr.String(), "BAE_LAUNCHER_API_TOKEN is UNSET")
		r.stop()
		assert.Equal(t, 0, <-r.code)
	})

	t.Run("bind failure exits 1", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		var stderr strings.Builder
		code := execute(context.Background(), nil, lookupOf(temporal(map[string]string{
			"BAE_LAUNCHER_API_CONFIG": filepath.Join(t.TempDir(), "absent.toml"),
			"BAE_LAUNCHER_API_ADDR":   ln.Addr().String(),
		})), &strings.Builder{}, &stderr)
		assert.Equal(t, 1, code, stderr.String())
		assert.Contains(t, stderr.String(), ln.Addr().String())
	})

	t.Run("shutdown kills a hung child after the grace and exits 0", func(t *testing.T) {
		r := startBaeapi(t, temporal(map[string]string{
			"BAE_LAUNCHER_API_CONFIG":           writeFile(t, "bae-api.toml", hungTOML),
			"BAE_LAUNCHER_API_SHUTDOWN_TIMEOUT": "1",
		}))
		r.waitHealthy(t)
		resp, pid := triggerHung(t, context.Background(), r.url)
		defer resp.Body.Close()
		r.stop()
		select {
		case code := <-r.code:
			assert.Equal(t, 0, code, r.stderr.String())
		case <-time.After(30 * time.Second):
			t.Fatal("baeapi still running 30s after SIGTERM with a 1s grace")
		}
		assert.True(t, gone(pid), "the hung child was killed before baeapi returned")
	})

	t.Run("a caller hanging up kills its child", func(t *testing.T) {
		r := startBaeapi(t, temporal(map[string]string{"BAE_LAUNCHER_API_CONFIG": writeFile(t, "bae-api.toml", hungTOML)}))
		r.waitHealthy(t)
		ctx, hangUp := context.WithCancel(context.Background())
		resp, pid := triggerHung(t, ctx, r.url)
		hangUp()
		resp.Body.Close()
		require.Eventually(t, func() bool { return gone(pid) }, 30*time.Second, 20*time.Millisecond, "child of a closed request still runs")
		r.stop()
		assert.Equal(t, 0, <-r.code)
	})
}

// asLauncherEnv makes the test binary run baeapi's main instead of the
// tests, so a test can run baeapi as a process of its own and SIGKILL it.
const asLauncherEnv = "BAEAPI_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asLauncherEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// exited reports whether pid no longer runs: gone, or a zombie nobody has
// reaped yet (an orphan's new parent may never reap it).
func exited(pid int) bool {
	if gone(pid) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// "pid (comm) S ...": the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// TestSIGKILLedBaeapiTakesItsChildAlong: baeapi killed outright (SIGKILL,
// the OOM killer) has no chance to kill its agents' children; the kernel
// does, through the parent-death signal set at spawn.
func TestSIGKILLedBaeapiTakesItsChildAlong(t *testing.T) {
	ts := testenv.Temporal(t)
	addr := freeAddr(t)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), asLauncherEnv+"=1",
		"BAE_TEMPORAL_ADDR="+ts.GetFrontendHostPort(),
		"BAE_TEMPORAL_NAMESPACE="+ts.GetDefaultNamespace(),
		"BAE_LAUNCHER_API_CONFIG="+writeFile(t, "bae-api.toml", hungTOML),
		"BAE_LAUNCHER_API_ADDR="+addr)
	stderr := &testlog.Buffer{}
	cmd.Stdout, cmd.Stderr = &testlog.Buffer{}, stderr
	require.NoError(t, cmd.Start())
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	url := "http://" + addr
	require.Eventually(t, func() bool {
		resp, err := http.Get(url + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 60*time.Second, 50*time.Millisecond, "baeapi never became healthy: %s", stderr)

	resp, pid := triggerHung(t, context.Background(), url)
	defer resp.Body.Close()
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	<-waited
	require.Eventually(t, func() bool { return exited(pid) }, 10*time.Second, 20*time.Millisecond,
		"the agent's child outlived its SIGKILLed launcher")
}
