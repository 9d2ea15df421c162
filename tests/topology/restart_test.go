//go:build topology

package topology

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
)

// SIGKILL of the replica whose worker is in a turn's provider call: the
// other replica runs the turn to its end, once. The client sends under an
// Idempotency-Key through one replica and resends through the other when
// its stream breaks (the killed one may be the one it was talking to, or
// not: round 0 talks to a, round 1 to b). The lane of each provider request
// names the replica that made it, so the kill always lands on the runner.
func TestKillReplicaMidProviderCall(t *testing.T) {
	c := startCluster(t, clusterOptions{})
	h := c.holdFirstRequests()
	pid := c.profile(t)
	sid, sk := c.openSession(t, "a", pid)

	var sent []delivery
	for round, client := range []string{"a", "b"} {
		text := fmt.Sprintf("kill round %d", round)
		h.hold(text)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		res := make(chan delivery, 1)
		go func() { res <- c.sendKeyed(ctx, sid, sk, text, "kill-"+text[len(text)-1:], client, c.other(client)) }()

		runner := awaitRequest(t, c.fake, text).Lane
		c.reps[runner].Kill(t)
		d := <-res
		cancel()
		sent = append(sent, d)
		assert.Equal(t, []string{runner, c.other(runner)}, c.lanesOf(text),
			"round %d: the killed replica's provider call, then exactly one more from the survivor", round)
		c.reps[runner].Start(t)
	}
	c.checkExactlyOnce(t, "a", sid, sk, sent)
}

// A rolling restart (each replica stopped with SIGTERM and started again,
// one after the other) while three sessions keep sending messages through
// both replicas, each stop landing while a provider call is in flight:
// every message is answered, each turn runs once.
func TestRollingRestartWithTurnsInFlight(t *testing.T) {
	const sessions = 3
	c := startCluster(t, clusterOptions{})
	for name := range c.reps {
		c.fake.Lane(name).Respond(func(fakeprovider.Recorded) fakeprovider.Reply {
			return fakeprovider.Echo().After(300 * time.Millisecond)
		})
	}
	pid := c.profile(t)
	type sess struct {
		id, key string
		sent    []delivery
	}
	ss := make([]*sess, sessions)
	for i := range ss {
		id, key := c.openSession(t, "a", pid)
		ss[i] = &sess{id: id, key: key}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rolled := make(chan struct{})
	var answered atomic.Int64
	var wg sync.WaitGroup
	for i, s := range ss {
		order := []string{"a", "b"}
		if i%2 == 1 {
			order = []string{"b", "a"}
		}
		wg.Go(func() {
			// Keep sending until the roll is over, then two more.
			after := 0
			for j := 0; after < 2 && ctx.Err() == nil; j++ {
				select {
				case <-rolled:
					after++
				default:
				}
				text := fmt.Sprintf("rolling s%d m%02d", i, j)
				d := c.sendKeyed(ctx, s.id, s.key, text, fmt.Sprintf("roll-s%d-m%02d", i, j), order...)
				s.sent = append(s.sent, d)
				answered.Add(1)
				order[0], order[1] = order[1], order[0]
			}
		})
	}

	for _, name := range []string{"a", "b"} {
		drainStarted(c.fake)
		<-c.fake.Started() // a provider call is in flight now
		c.reps[name].Stop(t)
		c.reps[name].Start(t)
	}
	close(rolled)
	wg.Wait()
	require.NoError(t, ctx.Err(), "the drivers finished in time")
	t.Logf("%d messages across the roll", answered.Load())
	for _, s := range ss {
		c.checkExactlyOnce(t, "b", s.id, s.key, s.sent)
	}
}

// The Temporal server SIGKILLed while a turn's provider call is in flight,
// the provider answering while it is down, and the server started again on
// the same databases: the turn completes, exactly once.
func TestTemporalRestartMidTurn(t *testing.T) {
	c := startCluster(t, clusterOptions{})
	h := c.holdFirstRequests()
	pid := c.profile(t)
	sid, sk := c.openSession(t, "a", pid)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	warm := c.sendKeyed(ctx, sid, sk, "before the restart", "t-0", "a", "b")

	text := "across a Temporal restart"
	h.hold(text)
	res := make(chan delivery, 1)
	go func() { res <- c.sendKeyed(ctx, sid, sk, text, "t-1", "a", "b") }()
	awaitRequest(t, c.fake, text)

	killTemporal(t)
	c.fake.Release()
	require.NoError(t, script("../../scripts/temporal-up.sh", temporalEnv), "start Temporal again on its databases")
	d := <-res
	after := c.sendKeyed(ctx, sid, sk, "after the restart", "t-2", "b", "a")
	c.checkExactlyOnce(t, "b", sid, sk, []delivery{warm, d, after})
}

// holder makes the first provider request carrying a held text hang until
// Release (or until the replica that made it dies); every other request is
// answered with the echo at once.
type holder struct {
	mu   sync.Mutex
	held map[string]bool // text -> its first request has been seen
}

func (c *cluster) holdFirstRequests() *holder {
	h := &holder{held: map[string]bool{}}
	for name := range c.reps {
		c.fake.Lane(name).Respond(h.respond)
	}
	return h
}

func (h *holder) hold(text string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held[text] = false
}

func (h *holder) respond(rec fakeprovider.Recorded) fakeprovider.Reply {
	h.mu.Lock()
	defer h.mu.Unlock()
	text := rec.LastUserText()
	if seen, ok := h.held[text]; ok && !seen {
		h.held[text] = true
		return fakeprovider.Echo().UntilReleased()
	}
	return fakeprovider.Echo()
}

// awaitRequest waits for the fake's next request carrying text.
func awaitRequest(t *testing.T, fake *fakeprovider.Server, text string) fakeprovider.Recorded {
	t.Helper()
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case rec := <-fake.Started():
			if rec.LastUserText() == text {
				return rec
			}
		case <-timeout:
			require.FailNow(t, "no provider request for "+text)
		}
	}
}

// drainStarted forgets the requests already announced.
func drainStarted(fake *fakeprovider.Server) {
	for {
		select {
		case <-fake.Started():
		default:
			return
		}
	}
}

// lanesOf lists, in arrival order, the lane (replica) of every provider
// request carrying text.
func (c *cluster) lanesOf(text string) []string {
	var out []string
	for _, r := range c.fake.Requests() {
		if r.LastUserText() == text {
			out = append(out, r.Lane)
		}
	}
	return out
}

// profile creates the profile every session of the cluster uses.
func (c *cluster) profile(t *testing.T) string {
	t.Helper()
	return c.api("a").Profile(t, map[string]any{"name": "main", "primary_provider": "primary"})
}

// openSession opens a session through via and registers as its driver.
func (c *cluster) openSession(t *testing.T, via, profileID string) (string, string) {
	t.Helper()
	api := c.api(via)
	_, key := api.Key(t, profileID)
	sid, sk := api.Open(t, key, nil)
	api.Call(t, sid, sk, "session.registerDriver", nil)
	return sid, sk
}
