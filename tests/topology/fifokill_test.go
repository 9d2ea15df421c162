//go:build topology

package topology

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
)

// Drivers queued on one session through both replicas, one replica
// SIGKILLed with half of them waiting (some of its messages stored but
// maybe not yet signalled, one perhaps in its provider call): every driver
// whose stream broke resends under its Idempotency-Key through the
// survivor, the rest send there, and every message runs once, in the order
// the messages were stored (turn_inputs.created_at). A late signal (a resend, the orphan sweep)
// takes its place by arrival.
func TestDriversFIFOThroughAReplicaKill(t *testing.T) {
	const drivers, killAfter = 24, 12
	c := startCluster(t, clusterOptions{Env: uncappedQueue})
	for name := range c.reps {
		c.fake.Lane(name).Respond(func(fakeprovider.Recorded) fakeprovider.Reply {
			return fakeprovider.Echo().After(500 * time.Millisecond)
		})
	}
	pid := c.profile(t)
	sid, sk := c.openSession(t, "b", pid)
	keys := []string{sk}
	for len(keys) < drivers {
		_, k := c.api("b").Key(t, pid)
		dk := c.api("b").Join(t, sid, k, nil)
		c.api("b").Call(t, sid, dk, "session.registerDriver", nil)
		keys = append(keys, dk)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	db, err := pgx.Connect(ctx, c.dbURL)
	require.NoError(t, err)
	defer db.Close(context.WithoutCancel(ctx))
	stored := func() int {
		var n int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM turn_inputs WHERE session_id = $1`, sid).Scan(&n))
		return n
	}

	sent := make([]delivery, drivers)
	var wg sync.WaitGroup
	tick := time.NewTicker(50 * time.Millisecond) // the load's shape, not synchronisation
	defer tick.Stop()
	for i := range drivers {
		if i > 0 {
			<-tick.C
		}
		if i == killAfter {
			// Every message so far is stored: they are all ahead of the rest.
			require.Eventually(t, func() bool { return stored() == killAfter }, time.Minute, 10*time.Millisecond)
			c.reps["a"].Kill(t)
		}
		via := []string{"a", "b"}
		switch {
		case i >= killAfter:
			via = []string{"b"} // the balancer stopped sending to the dead replica
		case i%2 == 1:
			via = []string{"b", "a"}
		}
		text := fmt.Sprintf("fifo kill %02d", i)
		wg.Go(func() { sent[i] = c.sendKeyed(ctx, sid, keys[i], text, fmt.Sprintf("fifo-kill-%02d", i), via...) })
	}
	wg.Wait()
	require.NoError(t, ctx.Err(), "every driver was answered in time")

	// Arrival is when a message was stored: on a loaded machine two sends
	// 50 ms apart can reach the server in either order, so the deliveries
	// are put in the order the database stored them, and the log must
	// follow it.
	arrived := map[string]time.Time{}
	rows, err := db.Query(ctx, `SELECT idem_key, created_at FROM turn_inputs WHERE session_id = $1`, sid)
	require.NoError(t, err)
	for rows.Next() {
		var key string
		var at time.Time
		require.NoError(t, rows.Scan(&key, &at))
		arrived[key] = at
	}
	require.NoError(t, rows.Err())
	order := make([]int, drivers)
	for i := range order {
		order[i] = i
	}
	key := func(i int) string { return fmt.Sprintf("fifo-kill-%02d", i) }
	sort.SliceStable(order, func(x, y int) bool { return arrived[key(order[x])].Before(arrived[key(order[y])]) })
	byArrival := make([]delivery, drivers)
	for i, j := range order {
		byArrival[i] = sent[j]
	}
	c.checkExactlyOnce(t, "b", sid, sk, byArrival)
}
