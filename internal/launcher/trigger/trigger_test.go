package trigger

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/launcher"
	"github.com/bae-go/bae-go/internal/testing/testenv"
	"github.com/bae-go/bae-go/internal/testing/testlog"
)

// launcherEnv is a running baeapi on an embedded Temporal.
type launcherEnv struct {
	url    string
	stdout *testlog.Buffer
	stderr *testlog.Buffer
	stop   context.CancelFunc
	done   chan error
}

func startAPI(t *testing.T, c client.Client, toml string, mod func(*Options)) *launcherEnv {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bae-api.toml")
	require.NoError(t, os.WriteFile(path, []byte(toml), 0o600))
	e := &launcherEnv{stdout: &testlog.Buffer{}, stderr: &testlog.Buffer{}, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	e.stop = cancel
	addr := make(chan string, 1)
	o := Options{
		ConfigPath: path, Addr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second,
		Client: c, Logger: launcher.NewLogger(e.stderr, config.Log{Level: slog.LevelDebug}), Stdout: e.stdout, Stderr: e.stderr,
		Lookup: func(k string) (string, bool) {
			return map[string]string{"ALPHA_TOKEN": "tok-123"}[k], k == "ALPHA_TOKEN"
		},
		Listening: func(a string) { addr <- a },
	}
	if mod != nil {
		mod(&o)
	}
	go func() { e.done <- Run(ctx, o) }()
	select {
	case a := <-addr:
		e.url = "http://" + a
	case err := <-e.done:
		t.Fatalf("baeapi did not start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		<-e.done
	})
	return e
}

const agentsTOML = `
[[agents]]
name = "alpha"
command = "sh"
args = ["-c", "echo \"prompt=$AGENT_PROMPT token=$API_TOKEN args=$*\"; echo to-stderr >&2", "alpha"]
env = { API_TOKEN = "${ALPHA_TOKEN}" }
display_name = "Alpha"
[agents.request_schema]
type = "object"
required = ["prompt"]
[agents.request_schema.properties.prompt]
type = "string"
[[agents.env_template]]
field = "prompt"
env = "AGENT_PROMPT"
[[agents.arg_template]]
field = "priority"
flag = "--priority"

[[agents]]
name = "unset"
command = "true"
env = { T = "${NOT_SET_ANYWHERE}" }

[[agents]]
name = "broken"
command = "/nonexistent/harness"

[[agents]]
name = "slow"
command = "sh"
args = ["-c", "echo first; while [ ! -e \"$GO\" ]; do sleep 0.05; done; echo second; exit 7"]
[[agents.env_template]]
field = "go"
env = "GO"
`

func post(t *testing.T, url, body, token string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return resp
}

func problemOf(t *testing.T, resp *http.Response) map[string]any {
	t.Helper()
	defer resp.Body.Close()
	assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	var p map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
	return p
}

func TestTriggerAPI(t *testing.T) {
	ts := testenv.Temporal(t)
	e := startAPI(t, ts.GetDefaultClient(), agentsTOML, nil)
	assert.Contains(t, e.stderr.String(), "BAE_LAUNCHER_API_TOKEN is UNSET", "BAE's open-port warning")

	t.Run("healthz and introspection never show commands or env", func(t *testing.T) {
		resp, err := http.Get(e.url + "/healthz")
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, 200, resp.StatusCode)

		resp, err = http.Get(e.url + "/_launcher/agents")
		require.NoError(t, err)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body := string(raw)
		for _, secret := range []string{"command", "args", "env_template", "arg_template", "ALPHA_TOKEN", "${", "tok-123", "working_dir", "nonexistent"} {
			assert.NotContains(t, body, secret)
		}
		var list []map[string]any
		require.NoError(t, json.Unmarshal(raw, &list))
		require.Len(t, list, 4)
		assert.Equal(t, "alpha", list[0]["name"])
		assert.Equal(t, "Alpha", list[0]["display_name"])
		assert.Nil(t, list[1]["display_name"])
		assert.Equal(t, "prompt", list[0]["chat_input_field"])
		assert.Equal(t, []any{}, list[0]["prompts"])

		resp, err = http.Get(e.url + "/_launcher/agents/nope")
		require.NoError(t, err)
		assert.Equal(t, 404, resp.StatusCode)
		assert.Equal(t, "not_found", problemOf(t, resp)["type"])
	})

	t.Run("a trigger streams the attributed output and ends with the exit code", func(t *testing.T) {
		resp := post(t, e.url+"/agents/alpha/trigger", `{"prompt":"hi ${ALPHA_TOKEN}","priority":3}`, "")
		defer resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, "application/x-ndjson", resp.Header.Get("Content-Type"))
		raw, _ := io.ReadAll(resp.Body)
		lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
		require.Len(t, lines, 3, string(raw))
		assert.Contains(t, lines, "[alpha] prompt=hi ${ALPHA_TOKEN} token=tok-123 args=--priority 3", "body values are never resolved; static env is")
		assert.Contains(t, lines, "[alpha] to-stderr")
		assert.Equal(t, `{"exit_code":0}`, lines[2])
		assert.Contains(t, e.stdout.String(), "[alpha] prompt=hi")
		assert.Contains(t, e.stderr.String(), "[alpha] to-stderr")
	})

	t.Run("a trigger's run history replays", func(t *testing.T) {
		recordLaunchHistory(t, ts.GetDefaultClient(), "alpha", "launch_trigger")
	})

	t.Run("refusals", func(t *testing.T) {
		p := problemOf(t, post(t, e.url+"/agents/alpha/trigger", `{not json`, ""))
		assert.Equal(t, "bad_request", p["type"])
		assert.EqualValues(t, 400, p["status"])

		p = problemOf(t, post(t, e.url+"/agents/alpha/trigger", `{"priority":1}`, ""))
		assert.Equal(t, "bad_request", p["type"])
		assert.Contains(t, p["detail"], `/prompt: "prompt" is a required property`)

		p = problemOf(t, post(t, e.url+"/agents/alpha/trigger", `{"prompt":5}`, ""))
		assert.Contains(t, p["detail"], `/prompt:`)

		p = problemOf(t, post(t, e.url+"/agents/nope/trigger", `{}`, ""))
		assert.Equal(t, "not_found", p["type"])

		p = problemOf(t, post(t, e.url+"/agents/unset/trigger", ``, ""))
		assert.Equal(t, "internal", p["type"])
		assert.Contains(t, p["detail"], "NOT_SET_ANYWHERE")

		p = problemOf(t, post(t, e.url+"/agents/broken/trigger", `{}`, ""))
		assert.Equal(t, "internal", p["type"])
		assert.EqualValues(t, 500, p["status"])
	})

	t.Run("output arrives before the child exits, and concurrent triggers run independently", func(t *testing.T) {
		dir := t.TempDir()
		var wg sync.WaitGroup
		for i, name := range []string{"a", "b", "c"} {
			gate := filepath.Join(dir, name)
			resp := post(t, e.url+"/agents/slow/trigger", `{"go":"`+gate+`"}`, "")
			require.Equal(t, 200, resp.StatusCode)
			r := bufio.NewReader(resp.Body)
			first, err := r.ReadString('\n')
			require.NoError(t, err)
			assert.Equal(t, "[slow] first\n", first, "run %d", i)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer resp.Body.Close()
				rest, _ := io.ReadAll(r)
				assert.Equal(t, "[slow] second\n{\"exit_code\":7}\n", string(rest))
			}()
		}
		for _, name := range []string{"c", "a", "b"} {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), nil, 0o600))
		}
		wg.Wait()
	})
}

func TestTriggerToken(t *testing.T) {
	ts := testenv.Temporal(t)
	e := startAPI(t, ts.GetDefaultClient(), agentsTOML, func(o *Options) { o.Token = "launch-secret" })
	assert.Equal(t, "unauthorized", problemOf(t, post(t, e.url+"/agents/alpha/trigger", `{"prompt":"x"}`, ""))["type"])
	assert.Equal(t, "unauthorized", problemOf(t, post(t, e.url+"/agents/alpha/trigger", `{"prompt":"x"}`, "wrong"))["type"])
	resp := post(t, e.url+"/agents/alpha/trigger", `{"prompt":"x"}`, "launch-secret")
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	// Health and introspection stay open.
	r, err := http.Get(e.url + "/_launcher/agents")
	require.NoError(t, err)
	r.Body.Close()
	assert.Equal(t, 200, r.StatusCode)
}

// recordLaunchHistory replays the history of agent's finished Launch run
// against the current workflow code and, with BAE_RECORD_HISTORY=1, writes
// it to internal/launcher/testdata/name.json, where
// launcher.TestReplayRecordedHistories keeps replaying it.
func recordLaunchHistory(t *testing.T, c client.Client, agent, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var id string
	require.Eventually(t, func() bool {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: "WorkflowType = '" + launcher.WorkflowName + "' AND ExecutionStatus = 'Completed'",
		})
		if err != nil {
			return false
		}
		for _, e := range resp.Executions {
			if strings.HasPrefix(e.GetExecution().GetWorkflowId(), "baeapi-"+agent+"-") {
				id = e.GetExecution().GetWorkflowId()
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "no completed run of %s listed", agent)
	hist := &historypb.History{}
	it := c.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		hist.Events = append(hist.Events, ev)
	}
	require.NotEmpty(t, hist.Events)
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(launcher.Launch, workflow.RegisterOptions{Name: launcher.WorkflowName})
	require.NoError(t, r.ReplayWorkflowHistory(nil, hist))
	if os.Getenv("BAE_RECORD_HISTORY") != "" {
		b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(hist)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join("..", "testdata", name+".json"), b, 0o644))
	}
}

// isolationTOML: printenv prints its environment; beta names a key of its
// own; marker leaves a file behind when it runs.
const isolationTOML = `
[[agents]]
name = "printenv"
command = "env"
env = { OWN_KEY = "${ALPHA_KEY}" }

[[agents]]
name = "beta"
command = "true"
env = { KEY = "${BETA_KEY}" }

[[agents]]
name = "marker"
command = "sh"
args = ["-c", "echo ran; touch \"$MARK\""]
[[agents.env_template]]
field = "mark"
env = "MARK"
`

func TestTriggerIsolation(t *testing.T) {
	secrets := map[string]string{
		"BAE_LAUNCHER_API_TOKEN": "launcher-token-secret",
		"BAE_DATABASE_URL":       "postgres://bae:db-secret@db/bae",
		"BETA_KEY":               "beta-key-secret",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	t.Setenv("ALPHA_KEY", "alpha-key-value")
	ts := testenv.Temporal(t)
	e := startAPI(t, ts.GetDefaultClient(), isolationTOML, func(o *Options) {
		o.Token = "launcher-token-secret"
		o.Lookup = os.LookupEnv
	})
	const token = "launcher-token-secret"

	t.Run("a child sees its own env, not the launcher's token, database URL or another agent's key", func(t *testing.T) {
		resp := post(t, e.url+"/agents/printenv/trigger", `{}`, token)
		defer resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
		raw, _ := io.ReadAll(resp.Body)
		got := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			k, v, _ := strings.Cut(strings.TrimPrefix(l, "[printenv] "), "=")
			got[k] = v
		}
		for k, v := range secrets {
			assert.NotContains(t, got, k)
			assert.NotContains(t, string(raw), v, "%s's value reached the child", k)
		}
		assert.Equal(t, "alpha-key-value", got["OWN_KEY"])
		assert.Equal(t, os.Getenv("PATH"), got["PATH"])
	})

	t.Run("a browser's cross-site trigger is refused before anything runs", func(t *testing.T) {
		dir := t.TempDir()
		host := strings.TrimPrefix(e.url, "http://")
		try := func(body string, header map[string]string) (*http.Response, string) {
			mark := filepath.Join(dir, newHandle())
			req, err := http.NewRequest(http.MethodPost, e.url+"/agents/marker/trigger", strings.NewReader(strings.ReplaceAll(body, "MARK", mark)))
			require.NoError(t, err)
			for k, v := range header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			return resp, mark
		}
		refused := []struct {
			status int
			slug   string
			header map[string]string
		}{
			// A form or no-cors fetch from another site, token or not.
			{403, "forbidden", map[string]string{"Origin": "http://evil.example", "Content-Type": "text/plain"}},
			{403, "forbidden", map[string]string{"Origin": "http://evil.example", "Content-Type": "application/json", "Authorization": "Bearer " + token}},
			{403, "forbidden", map[string]string{"Origin": "null", "Content-Type": "application/x-www-form-urlencoded"}},
			{403, "forbidden", map[string]string{"Origin": "http://127.0.0.1:1", "Content-Type": "text/plain"}},
			{403, "forbidden", map[string]string{"Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"}},
			{403, "forbidden", map[string]string{"Sec-Fetch-Site": "same-site", "Content-Type": "application/json"}},
			// From baeapi's own origin, a browser must still say JSON.
			{415, "unsupported_media_type", map[string]string{"Origin": "http://" + host, "Content-Type": "text/plain", "Authorization": "Bearer " + token}},
		}
		for _, c := range refused {
			resp, mark := try(`{"mark":"MARK"}`, c.header)
			p := problemOf(t, resp)
			assert.Equal(t, c.status, resp.StatusCode, "%v", c.header)
			assert.Equal(t, c.slug, p["type"], "%v", c.header)
			assert.NoFileExists(t, mark, "the agent ran for %v", c.header)
		}
		served := []map[string]string{
			// The web app: same origin, JSON.
			{"Origin": "http://" + host, "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json; charset=utf-8"},
			// Behind a reverse proxy that rewrote Host.
			{"Origin": "https://agents.example.com", "X-Forwarded-Host": "agents.example.com", "Content-Type": "application/json"},
			// Not a browser: BAE's rules, whatever the Content-Type (curl --data).
			{"Content-Type": "application/x-www-form-urlencoded"},
			{},
		}
		for _, h := range served {
			h["Authorization"] = "Bearer " + token
			resp, mark := try(`{"mark":"MARK"}`, h)
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			assert.Equal(t, 200, resp.StatusCode, "%v: %s", h, raw)
			assert.Equal(t, "[marker] ran\n{\"exit_code\":0}\n", string(raw), "%v", h)
			assert.FileExists(t, mark, "%v", h)
		}
	})
}

func TestListenAddr(t *testing.T) {
	for _, c := range []struct {
		env, file, token, want string
		loopbackOnly           bool
	}{
		{"", "", "", "127.0.0.1:9090", true}, // no token: this machine only
		{"", "", "t", "0.0.0.0:9090", false},
		{"0.0.0.0:9090", "", "", "0.0.0.0:9090", false}, // asked for: served, with the warning
		{"", "0.0.0.0:8000", "", "0.0.0.0:8000", false},
		{"127.0.0.1:1", "0.0.0.0:8000", "t", "127.0.0.1:1", false},
	} {
		addr, lo := listenAddr(c.env, c.file, c.token)
		assert.Equal(t, c.want, addr, "%+v", c)
		assert.Equal(t, c.loopbackOnly, lo, "%+v", c)
	}
}
