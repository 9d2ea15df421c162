//go:build topology

package topology

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// Log lines of a replica that announces interests when it finds, and then
// no longer finds, a listener that does not (internal/lib/live).
const (
	legacyFound = "replicas that do not announce interests are listening"
	legacyGone  = "every listening replica announces its interests"
)

// TestRollingUpgradeFromReplicasWithoutInterest: a rolling upgrade from a
// version before interest announcements (BAE_DELTAS_INTEREST=0 behaves as
// one: it announces nothing and sends every delta). While replica b still
// runs the old version, an observer on b gets, whole and without a reset,
// the deltas of a turn whose provider call runs on the upgraded a, which
// is sent only what is announced unless it finds such a listener; once b
// is upgraded too, a goes back to that and b's announced interest brings
// them.
//
// Which replica runs a turn is Temporal's choice; the turns run on a
// because the session's workflow is sticky to a: its first turn ran while
// b was down (b's node restarting mid-upgrade, still on the old version).
// The old version is simulated by the switch rather than built from an
// older commit: the wire between replicas is the same (an old replica
// ignores announcements and never makes one), and a test that builds a
// second tree would need the repository's history and minutes of build.
func TestRollingUpgradeFromReplicasWithoutInterest(t *testing.T) {
	c := startCluster(t, clusterOptions{Env: map[string]string{"BAE_DELTAS_INTEREST": "0"}})
	a, b := c.reps["a"], c.reps["b"]
	pid := c.profile(t)

	// a is upgraded; it finds b's listener before it is ready.
	a.Stop(t)
	a.setEnv("BAE_DELTAS_INTEREST", "")
	a.Start(t)
	a.awaitLog(t, legacyFound, 1)

	// b's node restarts: while it is down the session's first turn runs on
	// a, and a sees every listener announce.
	b.Stop(t)
	a.awaitLog(t, legacyGone, 1)
	sid, sk := c.openSession(t, "a", pid)
	c.fake.Lane("a").Enqueue(fakeprovider.Text("first"))
	term := testenv.Terminal(t, c.api("a").RPC(t, sid, sk, sendRequest(1, "first turn")))
	require.Contains(t, term, "result", "%v", term)
	b.Start(t)
	a.awaitLog(t, legacyFound, 2)

	c.observeTurnOnA(t, sid, sk, "observed from the old replica", 2)

	// b is upgraded: a sends only what is announced again, and b
	// announces.
	b.Stop(t)
	b.setEnv("BAE_DELTAS_INTEREST", "")
	b.Start(t)
	a.awaitLog(t, legacyGone, 2)
	c.observeTurnOnA(t, sid, sk, "observed from the upgraded replica", 3)
}

const upgradeText = "The quick brown fox jumps over the lazy dog, streamed piece by piece."

// observeTurnOnA sends text through a while an observer on b with deltas
// on follows the session; the provider call must run on a, and b's
// observer must get its deltas whole, without a reset, before its answer.
func (c *cluster) observeTurnOnA(t *testing.T, sid, sk, text string, id int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sub := map[string]any{"jsonrpc": "2.0", "id": 100 + id, "method": "session.subscribe", "params": map[string]any{}}
	obs := c.api("b").RPCStreamHeader(t, ctx, sid, sk, sub, http.Header{"Bae-Deltas": {"on"}})
	defer obs.Close()
	require.Equal(t, http.StatusOK, obs.Status())

	// The answer starts with the turn's own text: a subscriber may also
	// get the kept deltas of the session's earlier turns.
	want := text + ": " + upgradeText
	drainStarted(c.fake)
	c.fake.Lane("a").Enqueue(fakeprovider.Text(want).Streamed(12, 0).HangStream(4))
	drv := c.api("a").RPCStream(t, ctx, sid, sk, sendRequest(id, text))
	defer drv.Close()
	require.Equal(t, "a", awaitRequest(t, c.fake, text).Lane, "the turn runs on a (its workflow is sticky there)")

	texts, resets := map[string]string{}, map[string]int{}
	released := false
	for {
		m := obs.Next(30 * time.Second)
		require.NotNil(t, m, "observer on b: have %q", texts)
		if m["method"] == "session.delta" {
			p := m["params"].(map[string]any)
			turn := p["turn_id"].(string)
			switch p["type"] {
			case "reset":
				resets[turn]++
			case "superseded":
				texts[turn] = ""
			case "text_delta":
				texts[turn] += p["text"].(string)
				if !released && strings.HasPrefix(want, texts[turn]) {
					// This turn's deltas reach b while its provider
					// call still runs.
					released = true
					c.fake.Release()
				}
			}
			continue
		}
		if p, ok := m["params"].(map[string]any); ok && p["event_type"] == "server.message.send" {
			break
		}
	}
	assert.True(t, released, "no delta of the turn before its answer")
	turn := ""
	for id, got := range texts {
		if got == want {
			turn = id
		}
	}
	require.NotEmpty(t, turn, "the deltas b relayed make the answer: have %q", texts)
	assert.Zero(t, resets[turn], "the observer on b got a reset")
	for range drv.Lines() {
	}
}

// setEnv sets (or, with v "", removes) one variable for the next Start.
func (p *proc) setEnv(k, v string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	env := p.env[:0:0]
	for _, kv := range p.env {
		if !strings.HasPrefix(kv, k+"=") {
			env = append(env, kv)
		}
	}
	if v != "" {
		env = append(env, k+"="+v)
	}
	p.env = env
}

// awaitLog waits until the running incarnation's log holds line n times.
func (p *proc) awaitLog(t *testing.T, line string, n int) {
	t.Helper()
	p.mu.Lock()
	path := filepath.Join(p.logDir, fmt.Sprintf("baesrv-%s-%d.log", p.name, p.incarnation))
	p.mu.Unlock()
	var have int
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(path)
		have = strings.Count(string(b), line)
		return have >= n
	}, time.Minute, 100*time.Millisecond, "baesrv %s logged %q %d times, want %d", p.name, line, have, n)
}
