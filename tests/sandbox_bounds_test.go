package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
)

// inspect returns the engine's view of a sandbox container.
func inspect(t *testing.T, id string) container.InspectResponse {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	require.NoError(t, err)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ins, err := cli.ContainerInspect(ctx, id)
	require.NoError(t, err)
	return ins
}

// TestSandboxBounds: remote sandboxes start bounded by [sandbox] (or its
// defaults), a profile's "sandbox" object overrides it, an exec past its
// timeout is killed and the model is told, and cut output is marked.
func TestSandboxBounds(t *testing.T) {
	image := buildImages(t, 1)[0]
	e := newEnv(t, envOpts{extraTOML: "\n[sandbox]\nmemory_mib = 256\npids = 128\n"})
	lane := e.fake.Lane("primary")

	// A profile without overrides: the file's values, the defaults for the rest.
	plain := e.profile(map[string]any{"available_sandboxes": []string{image}})
	e.waitProvisioned(plain, image)
	d := e.openOn(plain, map[string]any{"sandbox_tools": []any{shellTool}})
	d.reapOnCleanup()
	d.register()
	sbID := result(t, d.call("session.startRemoteSandbox", map[string]any{"image": image}))["sandbox_id"].(string)
	ins := inspect(t, sbID)
	hc := ins.HostConfig
	assert.Equal(t, int64(256<<20), hc.Memory)
	assert.Equal(t, int64(1e9), hc.NanoCPUs)
	require.NotNil(t, hc.PidsLimit)
	assert.Equal(t, int64(128), *hc.PidsLimit)
	assert.Equal(t, []string{"ALL"}, []string(hc.CapDrop))
	assert.Empty(t, hc.CapAdd)
	assert.Equal(t, []string{"no-new-privileges:true"}, hc.SecurityOpt)
	assert.Equal(t, "none", string(hc.NetworkMode))
	assert.Empty(t, ins.Config.User)

	// Large output is cut, and both the tool result and the response say so.
	lane.Enqueue(fakeprovider.ToolUse("tu_big", "run_shell_command", map[string]any{"command": "yes 0123456789 | head -c 1100000"}), fakeprovider.Text("big"))
	_, term := d.send("flood")
	evs := resultEvents(term)
	resp := payload(ofType(evs, "sandbox.response")[0])["result"].(map[string]any)
	assert.Equal(t, true, resp["truncated"])
	text := onlyText(t, payload(ofType(evs, "tool.result")[0])["content"])
	assert.True(t, strings.HasSuffix(text, "\n[output truncated: 51424 bytes omitted]"), text[max(0, len(text)-80):])

	// A profile that allows the network, more memory and a short timeout.
	tight := e.profile(map[string]any{"available_sandboxes": []string{image},
		"sandbox": map[string]any{"network": "bridge", "memory_mib": 128, "exec_timeout_secs": 2, "cap_add": []string{"CHOWN"}, "user": "65534"}})
	e.waitProvisioned(tight, image)
	d2 := e.openOn(tight, map[string]any{"sandbox_tools": []any{shellTool}})
	d2.reapOnCleanup()
	d2.register()
	sb2 := result(t, d2.call("session.startRemoteSandbox", map[string]any{"image": image}))["sandbox_id"].(string)
	ins = inspect(t, sb2)
	hc = ins.HostConfig
	assert.Equal(t, int64(128<<20), hc.Memory)
	assert.Equal(t, int64(128), *hc.PidsLimit, "the file's value where the profile sets none")
	assert.Equal(t, "bridge", string(hc.NetworkMode))
	assert.Equal(t, []string{"CAP_CHOWN"}, normalizedCaps(hc.CapAdd))
	assert.Equal(t, "65534", ins.Config.User)

	// An Auto-mode exec past the timeout is killed; the model is told.
	begin := time.Now()
	lane.Enqueue(fakeprovider.ToolUse("tu_slow", "run_shell_command", map[string]any{"command": "echo started; sleep 30; echo never"}), fakeprovider.Text("slow"))
	_, term = d2.send("slow")
	assert.Less(t, time.Since(begin), 20*time.Second)
	evs = resultEvents(term)
	resp = payload(ofType(evs, "sandbox.response")[0])
	assert.Equal(t, false, resp["ok"])
	assert.Equal(t, true, resp["result"].(map[string]any)["timed_out"])
	res := payload(ofType(evs, "tool.result")[0])
	assert.Equal(t, true, res["is_error"])
	text = onlyText(t, res["content"])
	assert.True(t, strings.HasPrefix(text, "started\n"), text)
	assert.Contains(t, text, "[timed out after 2s: the command was killed]")
	assert.NotContains(t, text, "never")

	// So is an RPC exec.
	msg := rpcError(t, d2.call("session.execRemoteSandbox", map[string]any{"command": "sleep 30"}), -32000)
	assert.Contains(t, msg, "timed out after 2s")
	ok := result(t, d2.call("session.execRemoteSandbox", map[string]any{"command": "id -u"}))
	assert.Equal(t, "65534\n", ok["stdout"])
}

func normalizedCaps(caps []string) []string {
	out := make([]string, 0, len(caps))
	for _, c := range caps {
		if !strings.HasPrefix(c, "CAP_") {
			c = "CAP_" + c
		}
		out = append(out, c)
	}
	return out
}
