package compose

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/bae-go/bae-go/internal/lib/tcpproxy"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testdb"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// stack is one run of docker-compose.yml with the stand-ins swapped in.
type stack struct {
	t       *testing.T
	root    string
	project string
	files   []string
	env     []string
}

// compose runs docker compose on the stack's project and files.
func (s *stack) compose(ctx context.Context, args ...string) (string, error) {
	full := []string{"compose", "-p", s.project}
	for _, f := range s.files {
		full = append(full, "-f", f)
	}
	return runErr(ctx, s.root, s.env, "docker", append(full, args...)...)
}

func (s *stack) must(ctx context.Context, args ...string) string {
	s.t.Helper()
	out, err := s.compose(ctx, args...)
	require.NoError(s.t, err)
	return out
}

// hostGateway is the address containers reach the host on
// (extra_hosts: host-gateway): the default bridge's own address on the
// host. The test's listeners for them bind there, not on every interface.
func hostGateway(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := strings.TrimSpace(run(t, ctx, "", nil, "docker", "network", "inspect", "bridge",
		"--format", `{{index .Options "com.docker.network.bridge.name"}}`))
	ifc, err := net.InterfaceByName(name)
	require.NoError(t, err, "the default bridge's interface %q", name)
	addrs, err := ifc.Addrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			return ipn.IP.String()
		}
	}
	t.Fatalf("%s has no IPv4 address", name)
	return ""
}

// The override file: what the test swaps into docker-compose.yml. Every
// service keeps its command, environment, volumes and health check from the
// real file except as listed here.
const overrideTemplate = `# tests/compose: stand-ins for images this machine cannot pull.
services:
  # PostgreSQL is the host's, through the test's forwarder on the host
  # gateway; the service is left out of the run.
  postgres:
    profiles: ["real-postgres"]
  temporal:
    image: %[1]s
    pull_policy: never
    # The UI, and the frontend for the test's own look at the workflows.
    ports: !override
      - "127.0.0.1::8233"
      - "127.0.0.1::7233"
    labels:
      %[5]s: %[6]s
  baesrv:
    build: !reset null
    image: %[2]s
    pull_policy: never
    # The image's own check, asked every second instead of every ten
    # (failures while it starts do not count, as in the image).
    healthcheck:
      interval: 1s
      start_period: 2m
    depends_on: !override
      temporal:
        condition: service_healthy
    extra_hosts:
      - "host.docker.internal:host-gateway"
    environment:
      BAE_DATABASE_URL: %[3]q
    volumes: !override
      - baedata:/var/lib/bae
      - %[4]s:/etc/bae/bae-config.toml:ro
    ports: !override
      - "127.0.0.1::8080"
    labels:
      %[5]s: %[6]s
networks:
  default:
    labels:
      %[5]s: %[6]s
volumes:
  temporaldata:
    labels:
      %[5]s: %[6]s
  baedata:
    labels:
      %[5]s: %[6]s
`

// TestDevStackEndToEnd runs docker-compose.yml with stand-ins (the Temporal
// dev server from internal/testing/temporalcli, baesrv from the Dockerfile
// on a busybox base, the host's PostgreSQL), answers a message through it,
// re-creates the Temporal container while a turn's provider call is held,
// and sees that turn and the next one complete.
func TestDevStackEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds images and runs a compose stack")
	}
	img := standins(t)
	root := repoRoot(t)
	gw := hostGateway(t)

	// The fake provider and PostgreSQL, where the containers reach them.
	fake := fakeprovider.NewHandler()
	ln, err := net.Listen("tcp", net.JoinHostPort(gw, "0"))
	require.NoError(t, err, "listen on the host gateway %s", gw)
	srv := &http.Server{Handler: fake, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { fake.Close(); _ = srv.Close() })
	dbURL := testdb.New(t)
	pg, err := tcpproxy.StartOn(net.JoinHostPort(gw, "0"), "127.0.0.1:5432")
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg.Close() })
	_, pgPort, _ := net.SplitHostPort(pg.Addr())
	containerDB := strings.Replace(dbURL, "127.0.0.1:5432", "host.docker.internal:"+pgPort, 1)
	require.NotEqual(t, dbURL, containerDB, "testdb's URL names 127.0.0.1:5432")

	work := t.TempDir()
	_, fakePort, _ := net.SplitHostPort(ln.Addr().String())
	cfg := filepath.Join(work, "bae-config.toml")
	require.NoError(t, os.WriteFile(cfg, []byte(testenv.PrimaryProviderTOML("http://host.docker.internal:"+fakePort)), 0o644))
	override := filepath.Join(work, "override.yml")
	require.NoError(t, os.WriteFile(override, []byte(fmt.Sprintf(overrideTemplate,
		img.temporal, img.baesrv, containerDB, cfg, labelKey, runID)), 0o644))

	s := &stack{t: t, root: root, project: runID + "-dev",
		files: []string{filepath.Join(root, devFile), override},
		env:   []string{"ANTHROPIC_API_KEY=unused-the-fake-provider-answers"}}
	// Registered before anything is created: down removes the
	// containers, network and volumes whatever way the test ends.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if t.Failed() {
			logs, _ := s.compose(ctx, "logs", "--no-color", "--tail", "200")
			t.Logf("compose logs:\n%s", logs)
		}
		if _, err := s.compose(ctx, "down", "--volumes", "--remove-orphans", "--timeout", "10"); err != nil {
			t.Errorf("compose down: %v", err)
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// --wait: every service healthy by its own health check (baesrv's is
	// the image's HEALTHCHECK).
	s.must(ctx, "up", "--detach", "--wait", "--wait-timeout", "180")
	client := "http://" + publishedAddr(t, s, ctx, "baesrv", "8080")
	awaitReady(t, ctx, client)

	t.Run("the dev server's UI is published on loopback", func(t *testing.T) {
		ui := publishedAddr(t, s, ctx, "temporal", "8233")
		assert.True(t, strings.HasPrefix(ui, "127.0.0.1:"), ui)
		resp, err := http.Get("http://" + ui + "/")
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
	})

	// A client key, the way the README says: baectl inside the container,
	// on the admin key the server wrote to its volume.
	var qs struct {
		Key struct {
			Key string `json:"key"`
		} `json:"key"`
	}
	out := s.must(ctx, "exec", "-T", "baesrv", "baectl", "quickstart", "--provider", "primary", "--tools", "", "--json")
	require.NoError(t, json.Unmarshal([]byte(out), &qs), out)
	require.NotEmpty(t, qs.Key.Key)
	api := &testenv.Server{ClientURL: client}
	sid, sk := api.Open(t, qs.Key.Key, nil)
	api.Call(t, sid, sk, "session.registerDriver", nil)

	assert.Equal(t, "echo: before the restart", answer(t, api.RPC(t, sid, sk, sendMessage("before the restart"))))
	// The session's workflow (its id is the session's) as Temporal has it
	// now: after the restart it must be the same run, not one baesrv
	// started afresh because the dev server lost its database.
	runBefore := workflowRun(t, ctx, s, sid)

	// The next turn's provider call is held until Temporal has been
	// re-created on its volume and reports healthy again.
	held := "across a Temporal restart"
	var once sync.Once
	fake.Respond(func(rec fakeprovider.Recorded) fakeprovider.Reply {
		if rec.LastUserText() == held {
			r := fakeprovider.Echo()
			once.Do(func() { r = r.UntilReleased() })
			return r
		}
		return fakeprovider.Echo()
	})
	stream := api.RPCStream(t, ctx, sid, sk, sendMessage(held))
	defer stream.Close()
	awaitRequest(t, ctx, fake, held)
	s.must(ctx, "up", "--detach", "--wait", "--wait-timeout", "120", "--no-deps", "--force-recreate", "temporal")
	fake.Release()
	var lines []map[string]any
	for m := range stream.Lines() {
		lines = append(lines, m)
	}
	assert.Equal(t, "echo: "+held, answer(t, lines), "the held turn completes after the restart")
	assert.Equal(t, "echo: after the restart", answer(t, api.RPC(t, sid, sk, sendMessage("after the restart"))))
	assert.Equal(t, runBefore, workflowRun(t, ctx, s, sid),
		"the session's workflow run survived the re-created container (the dev server's database is on its volume)")

	t.Run("launcher images run against the stack's Temporal", func(t *testing.T) {
		for _, image := range []string{img.api, img.webapp} {
			launcherHealthy(t, ctx, s, image)
		}
	})
}

// workflowRun is the run id of workflow id on the stack's Temporal, dialled
// on the frontend port the override publishes (the address changes when
// the container is re-created).
func workflowRun(t *testing.T, ctx context.Context, s *stack, id string) string {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: publishedAddr(t, s, ctx, "temporal", "7233"), Namespace: "default"})
	require.NoError(t, err)
	defer c.Close()
	d, err := c.DescribeWorkflowExecution(ctx, id, "")
	require.NoError(t, err, "describe the session's workflow %s", id)
	return d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
}

func sendMessage(text string) map[string]any {
	return map[string]any{"jsonrpc": "2.0", "id": 1, "method": "session.sendMessage",
		"params": map[string]any{"message": map[string]any{"content": text}}}
}

// answer is the text of the terminal result's message.
func answer(t *testing.T, lines []map[string]any) string {
	t.Helper()
	require.NotEmpty(t, lines, "the stream ended without a line")
	last := lines[len(lines)-1]
	res, ok := last["result"].(map[string]any)
	require.True(t, ok, "terminal line: %v", last)
	msg := res["message"].(map[string]any)
	if s, ok := msg["content"].(string); ok {
		return s
	}
	for _, b := range msg["content"].([]any) {
		if bm := b.(map[string]any); bm["type"] == "text" {
			return bm["text"].(string)
		}
	}
	return ""
}

func awaitRequest(t *testing.T, ctx context.Context, fake *fakeprovider.Server, text string) {
	t.Helper()
	for {
		select {
		case rec := <-fake.Started():
			if rec.LastUserText() == text {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no provider request for %q", text)
		}
	}
}

// publishedAddr is the host address compose published a container port on.
func publishedAddr(t *testing.T, s *stack, ctx context.Context, service, port string) string {
	t.Helper()
	out := strings.TrimSpace(s.must(ctx, "port", service, port))
	require.NotEmpty(t, out, "%s:%s is published", service, port)
	return strings.Fields(out)[0]
}

// awaitReady polls /readyz until it answers 200.
func awaitReady(t *testing.T, ctx context.Context, base string) {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s/readyz never answered 200", base)
		case <-tick.C:
		}
	}
}

// launcherHealthy runs a baeapi image on the stack's network, as a harness
// built FROM it would run, and waits for the image's own HEALTHCHECK to
// report healthy (checked every second instead of every ten; failures
// while it starts do not count, as in the image).
func launcherHealthy(t *testing.T, ctx context.Context, s *stack, image string) {
	t.Helper()
	name := fmt.Sprintf("%s-%s", s.project, strings.NewReplacer("/", "-", ":", "-").Replace(image))
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = runErr(c, "", nil, "docker", "rm", "-f", "-v", name)
	})
	run(t, ctx, "", nil, "docker", "run", "-d", "--name", name, "--label", labelKey+"="+runID,
		"--network", s.project+"_default", "-e", "BAE_TEMPORAL_ADDR=temporal:7233",
		"--health-interval", "1s", "--health-start-period", "1m", image)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		out := strings.TrimSpace(run(t, ctx, "", nil, "docker", "inspect", "--format", "{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}", name))
		switch out {
		case "running healthy":
			return
		case "running starting", "created ", "running ":
		default:
			logs, _ := runErr(ctx, "", nil, "docker", "logs", "--tail", "50", name)
			t.Fatalf("%s: %s\n%s", image, out, logs)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never became healthy", image)
		case <-tick.C:
		}
	}
}
