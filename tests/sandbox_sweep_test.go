package tests

import (
	"context"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/bae-go/bae-go/internal/lib/ids"
	"github.com/bae-go/bae-go/internal/sandbox"
	"github.com/bae-go/bae-go/internal/telemetry"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/procserver"
	"github.com/bae-go/bae-go/internal/testing/sandboxtest"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// sweepDriver is a Docker driver of the test's own, to plant and look for
// containers the way another process on the engine would.
func sweepDriver(t *testing.T) *sandbox.DockerDriver {
	t.Helper()
	drv, err := sandbox.NewDockerDriver(slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { _ = drv.Close() })
	return drv
}

// plant starts a container from image carrying labels, as a server of some
// deployment would have (the image's owner removes it at test end).
func plant(t *testing.T, drv sandbox.Driver, image string, labels map[string]string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := drv.Start(ctx, image, labels, sandbox.Policy{})
	require.NoError(t, err)
	return h.ID
}

// containerIDs lists the ids of the containers matching the label filter.
func containerIDs(t *testing.T, drv sandbox.Driver, filter string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := drv.List(ctx, filter)
	require.NoError(t, err)
	out := []string{}
	for _, c := range list {
		out = append(out, c.ID)
	}
	return out
}

// plantSwept plants, like plant, a container the running server's sweep is
// to remove. The sweep may list it between its create and its start and
// remove it, so the start meets "marked for removal" or "no such
// container": that container was still swept and counted, so it is
// planted again and taken says how many such were lost under reason.
func plantSwept(t *testing.T, drv sandbox.Driver, image string, labels map[string]string, taken map[string]int64, reason sandbox.ReapReason) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		h, err := drv.Start(ctx, image, labels, sandbox.Policy{})
		if err == nil {
			return h.ID
		}
		require.True(t, cerrdefs.IsConflict(err) || cerrdefs.IsNotFound(err), "%v", err)
		t.Logf("the sweep took a %s container before it started: %v", reason, err)
		taken[string(reason)]++
	}
}

func managedLabels(deployment, sessionID string) map[string]string {
	l := map[string]string{sandbox.LabelManaged: "true", sandbox.LabelDeployment: deployment}
	if sessionID != "" {
		l[sandbox.LabelSession] = sessionID
	}
	return l
}

// TestKilledReplicasSandboxIsReapedAtStart: replica A runs a session's
// sandbox and is SIGKILLed; the session is closed from replica B, whose
// Docker engine is another one (here: none reachable, as for a replica on
// another host), so the close's stop cannot reach the container and it
// keeps running with nobody tracking it. A's next start removes it. On the
// same engine, containers of another deployment (another database) are
// left alone, even one labelled with that very session, and one whose
// session no database of theirs knows.
func TestKilledReplicasSandboxIsReapedAtStart(t *testing.T) {
	image := sandboxtest.Image(t, "bae-sweep-test")
	drv := sweepDriver(t)
	ks := newKillable(t)
	fake := fakeprovider.New(t)
	temporal := procserver.Temporal(t)
	replica := func(env map[string]string) *procserver.Server {
		return procserver.Start(t, procserver.Options{
			Bin: ks.bin, DatabaseURL: ks.db, Temporal: temporal, DataDir: ks.dir,
			ConfigTOML: testenv.PrimaryProviderTOML(fake.URL()), Env: env,
		})
	}
	a := replica(nil)
	b := replica(map[string]string{"DOCKER_HOST": "unix://" + filepath.Join(t.TempDir(), "no-docker.sock")})

	pid := a.API.Profile(t, map[string]any{"name": "main", "primary_provider": "primary", "allowed_tools": []string{}, "available_sandboxes": []string{image}})
	_, ck := a.API.Key(t, pid)
	sid, sk := a.API.Open(t, ck, map[string]any{"client_version": "test"})
	a.API.Call(t, sid, sk, "session.registerDriver", nil)
	started := testenv.Terminal(t, a.API.Call(t, sid, sk, "session.startRemoteSandbox", map[string]any{"image": image}))
	require.NotNil(t, started["result"], "%v", started)
	sandboxID, _ := started["result"].(map[string]any)["sandbox_id"].(string)
	require.NotEmpty(t, sandboxID)

	other := "dep_other_" + ids.New("")[:12]
	foreignSame := plant(t, drv, image, managedLabels(other, sid))
	foreignUnknown := plant(t, drv, image, managedLabels(other, "ses_"+ids.New("")[:16]))
	foreignBare := plant(t, drv, image, managedLabels(other, ""))
	foreign := []string{foreignSame, foreignUnknown, foreignBare}

	a.Kill()
	r := b.API.Client(t, http.MethodDelete, "/api/v1/sessions/"+sid, sk, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	var stopErr map[string]any
	for _, ev := range eventsOf(t, b.API, sid, sk) {
		if ev["event_type"] == "session.sandbox.error" {
			stopErr = payload(ev)
		}
	}
	require.NotNil(t, stopErr, "B's stop could not reach the engine\nB:\n%s", b.Log())
	assert.Equal(t, "stop", stopErr["phase"])
	require.Contains(t, containerIDs(t, drv, sandbox.LabelSession+"="+sid), sandboxID,
		"the closed session's container outlived the close")

	a.Start()
	require.Eventually(t, func() bool {
		return strings.Contains(a.Log(), "removed sandbox containers of ended sessions")
	}, time.Minute, 50*time.Millisecond, "A's start-up sweep\nA:\n%s", a.Log())
	assert.NotContains(t, containerIDs(t, drv, sandbox.ManagedFilter), sandboxID, "the restarted replica removed it")
	log := a.Log()
	assert.Contains(t, log, sandboxID)
	assert.Contains(t, log, "reason=session_ended")
	left := containerIDs(t, drv, sandbox.LabelDeployment+"="+other)
	assert.ElementsMatch(t, foreign, left, "another deployment's containers are left alone")
}

// TestSandboxSweepWhileRunning: a running replica sweeps the engine every
// BAE_SANDBOX_SWEEP_INTERVAL. Containers of its deployment whose session
// ended, whose session the database does not know, or that have no
// session are removed and counted in bae.sandboxes.reaped by reason; the
// sandbox of an open session and the containers of another deployment
// stay.
func TestSandboxSweepWhileRunning(t *testing.T) {
	image := sandboxtest.Image(t, "bae-sweep-test")
	drv := sweepDriver(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	tel, err := telemetry.FromProviders(nil, mp, nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	e := newEnv(t, envOpts{telemetry: tel, serverEnv: map[string]string{"BAE_SANDBOX_SWEEP_INTERVAL": "100ms"}})
	dep, err := e.srv.Parts.Store.DeploymentID(context.Background())
	require.NoError(t, err)

	reaped := func() map[string]int64 {
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(context.Background(), &rm))
		out := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != telemetry.MetricSandboxesReaped {
					continue
				}
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					reason, _ := dp.Attributes.Value(attribute.Key("reason"))
					out[reason.AsString()] = dp.Value
				}
			}
		}
		return out
	}
	require.Eventually(t, func() bool { return len(reaped()) == 3 }, 30*time.Second, 20*time.Millisecond,
		"every reason's series exists from the start")
	assert.Equal(t, map[string]int64{"session_ended": 0, "session_unknown": 0, "no_session": 0}, reaped())

	pid := e.profile(map[string]any{"available_sandboxes": []string{image}})
	open := e.openOn(pid, nil)
	open.register()
	started := result(t, open.call("session.startRemoteSandbox", map[string]any{"image": image}))
	openSandbox := started["sandbox_id"].(string)
	closed := e.openOn(pid, nil)
	closed.closeSession()

	// What a killed replica, a failed stop or a restored database leaves.
	// The sweep runs all along, so it may take one before it started.
	taken := map[string]int64{}
	ended := plantSwept(t, drv, image, managedLabels(dep, closed.sid), taken, sandbox.ReapSessionEnded)
	unknown := plantSwept(t, drv, image, managedLabels(dep, "ses_"+ids.New("")[:16]), taken, sandbox.ReapSessionUnknown)
	bare := plantSwept(t, drv, image, managedLabels(dep, ""), taken, sandbox.ReapNoSession)
	foreign := plant(t, drv, image, managedLabels("dep_other_"+ids.New("")[:12], closed.sid))

	require.Eventually(t, func() bool {
		left := containerIDs(t, drv, sandbox.LabelDeployment+"="+dep)
		return !slices.Contains(left, ended) && !slices.Contains(left, unknown) && !slices.Contains(left, bare)
	}, time.Minute, 20*time.Millisecond, "the sweep removes the ended, unknown and bare containers")
	// A pass lists, then removes: once a container planted now is gone, the
	// passes that saw the first ones are over.
	sentinel := plantSwept(t, drv, image, managedLabels(dep, "ses_"+ids.New("")[:16]), taken, sandbox.ReapSessionUnknown)
	require.Eventually(t, func() bool {
		return !slices.Contains(containerIDs(t, drv, sandbox.LabelDeployment+"="+dep), sentinel)
	}, time.Minute, 20*time.Millisecond)

	assert.Equal(t, []string{openSandbox}, containerIDs(t, drv, sandbox.LabelDeployment+"="+dep), "the open session's sandbox stays")
	assert.Contains(t, containerIDs(t, drv, sandbox.ManagedFilter), foreign, "another deployment's container stays")
	assert.Equal(t, map[string]int64{
		"session_ended":   1 + taken["session_ended"],
		"session_unknown": 2 + taken["session_unknown"],
		"no_session":      1 + taken["no_session"],
	}, reaped())
	out := result(t, open.call("session.execRemoteSandbox", map[string]any{"command": "echo alive"}))
	assert.Equal(t, "alive\n", out["stdout"])
}
