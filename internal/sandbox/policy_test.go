package sandbox

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func ptr[T any](v T) *T { return &v }

func TestStartBoundsTheContainer(t *testing.T) {
	f := newEngineFixture(t)
	d := f.driver

	t.Run("defaults", func(t *testing.T) {
		h := f.start(t, "ses_pol1_"+f.run)
		ins, err := d.cli.ContainerInspect(testCtx(t), h.ID)
		require.NoError(t, err)
		hc := ins.HostConfig
		assert.Equal(t, int64(512<<20), hc.Memory)
		assert.Equal(t, int64(512<<20), hc.MemorySwap, "no swap beyond the memory limit")
		assert.Equal(t, int64(1e9), hc.NanoCPUs)
		require.NotNil(t, hc.PidsLimit)
		assert.Equal(t, int64(256), *hc.PidsLimit)
		assert.Equal(t, []string{"ALL"}, []string(hc.CapDrop))
		assert.Empty(t, hc.CapAdd)
		assert.Equal(t, []string{"no-new-privileges:true"}, hc.SecurityOpt)
		assert.Equal(t, "none", string(hc.NetworkMode))
		assert.Empty(t, ins.Config.User)

		// What the command sees: no capabilities, no interface but loopback.
		res, err := d.Exec(testCtx(t), h.ID, `grep CapEff /proc/self/status; ls /sys/class/net`, nil)
		require.NoError(t, err)
		assert.Equal(t, []string{"CapEff:", "0000000000000000", "lo"}, strings.Fields(res.Stdout))
	})

	t.Run("a policy overrides each default", func(t *testing.T) {
		h := f.startWith(t, "ses_pol2_"+f.run, Policy{
			MemoryMiB: 64, CPUs: 0.5, Pids: 64, CapAdd: []string{"CHOWN", "KILL"},
			AllowNewPrivileges: true, User: "65534:65534", Network: "bridge",
		})
		ins, err := d.cli.ContainerInspect(testCtx(t), h.ID)
		require.NoError(t, err)
		hc := ins.HostConfig
		assert.Equal(t, int64(64<<20), hc.Memory)
		assert.Equal(t, int64(5e8), hc.NanoCPUs)
		assert.Equal(t, int64(64), *hc.PidsLimit)
		assert.Equal(t, []string{"ALL"}, []string(hc.CapDrop))
		assert.ElementsMatch(t, []string{"CAP_CHOWN", "CAP_KILL"}, normalizeCaps(hc.CapAdd))
		assert.Empty(t, hc.SecurityOpt)
		assert.Equal(t, "bridge", string(hc.NetworkMode))
		assert.Equal(t, "65534:65534", ins.Config.User)

		// The exec record works for a non-root user too.
		res, err := d.ExecOnce(testCtx(t), h.ID, ExecRequest{ID: "u1", Command: "id -u; ls /sys/class/net | grep -c .", Timeout: time.Minute})
		require.NoError(t, err)
		assert.Equal(t, []string{"65534", "2"}, strings.Fields(res.Stdout), res.Stderr)
	})

	t.Run("the pids limit holds", func(t *testing.T) {
		h := f.startWith(t, "ses_pol3_"+f.run, Policy{Pids: 40})
		res, err := d.ExecOnce(testCtx(t), h.ID, ExecRequest{ID: "p1", Timeout: time.Minute,
			Command: `i=0; l=; while [ $i -lt 60 ]; do sleep 20 >/dev/null 2>&1 & l="$l $!"; i=$((i+1)); done 2>/dev/null; ` +
				`ps | grep -c '[s]leep 20'; kill $l 2>/dev/null; true`})
		require.NoError(t, err)
		n := strings.TrimSpace(res.Stdout)
		assert.NotEqual(t, "60", n, "no more processes than the limit: %s", res.Stderr)
		assert.NotEqual(t, "0", n, "the loop started processes: %s", res.Stderr)
	})
}

// normalizeCaps accepts either spelling the engine may report.
func normalizeCaps(caps []string) []string {
	out := make([]string, 0, len(caps))
	for _, c := range caps {
		if !strings.HasPrefix(c, "CAP_") {
			c = "CAP_" + c
		}
		out = append(out, c)
	}
	return out
}

func TestSettingsNormalize(t *testing.T) {
	good := Settings{
		MemoryMiB: ptr[int64](1024), CPUs: ptr(2.5), Pids: ptr[int64](512),
		CapAdd: ptr([]string{"cap_chown", "CHOWN", " setuid "}), NoNewPrivileges: ptr(false),
		User: ptr("1000:1000"), Network: ptr("my-net.1"), ExecTimeoutSecs: ptr[int64](240),
	}
	n, err := good.Normalize()
	require.NoError(t, err)
	assert.Equal(t, []string{"CHOWN", "SETUID"}, *n.CapAdd)

	p := Policy{}.Apply(n)
	assert.Equal(t, Policy{MemoryMiB: 1024, CPUs: 2.5, Pids: 512, CapAdd: []string{"CHOWN", "SETUID"},
		AllowNewPrivileges: true, User: "1000:1000", Network: "my-net.1", ExecTimeout: 240 * time.Second}, p)
	assert.Equal(t, Policy{MemoryMiB: DefaultMemoryMiB, CPUs: DefaultCPUs, Pids: DefaultPids, Network: "none", ExecTimeout: 120 * time.Second},
		Policy{}.Resolved())
	assert.Equal(t, p, p.Resolved(), "set fields stay")
	assert.Equal(t, Policy{User: "x", Network: "bridge"}, Policy{User: "x", Network: "none"}.Apply(Settings{Network: ptr("bridge")}), "unset fields inherit")
	empty, err := Settings{User: ptr(""), CapAdd: &[]string{}}.Normalize()
	require.NoError(t, err)
	assert.Equal(t, Policy{CapAdd: []string{}}, Policy{User: "root", CapAdd: []string{"KILL"}}.Apply(empty), "an explicit empty value clears the layer below")

	for field, s := range map[string]Settings{
		"memory_mib":        {MemoryMiB: ptr[int64](8)},
		"cpus":              {CPUs: ptr(math.NaN())},
		"pids":              {Pids: ptr[int64](0)},
		"cap_add":           {CapAdd: ptr([]string{"ALL"})},
		"exec_timeout_secs": {ExecTimeoutSecs: ptr[int64](241)},
		"user":              {User: ptr("root; rm -rf /")},
		"network":           {Network: ptr("host")},
	} {
		_, err := s.Normalize()
		var se *SettingsError
		require.True(t, errors.As(err, &se), field)
		assert.Equal(t, field, se.Field)
	}
	for _, s := range []Settings{{CPUs: ptr(0.001)}, {CapAdd: ptr([]string{"NET_RAWR"})}, {Network: ptr("container:abc")}, {MemoryMiB: ptr[int64](1 << 21)}} {
		_, err := s.Normalize()
		assert.Error(t, err)
	}
}
