package crashlib

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"
)

// kill is one crash the killer caused.
type kill struct {
	N       int
	At      time.Time     // when the signal was sent (or Temporal stopped)
	Down    time.Duration // until both ports answered /healthz again
	AtCalls int           // calls finished when it fired
	Err     string
}

// killer crashes baesrv (or restarts Temporal) at random points of the run:
// each kill waits for a random number of finished calls, then a random
// jitter, so it lands anywhere in a turn: queued, in BeginTurn, mid
// provider call, while paused on a client tool, or between turns.
type killer struct {
	st        *stack
	prog      *progress
	points    []int
	maxJitter time.Duration
	temporal  bool
	kills     []kill
}

// killPoints draws n call counts in [1, 0.9*total], sorted, so every kill
// is due well before the drivers run out of work.
func killPoints(r *rand.Rand, n, total int) []int {
	hi := max(1, total*9/10)
	pts := make([]int, n)
	for i := range pts {
		pts[i] = 1 + r.IntN(hi)
	}
	slices.Sort(pts)
	return pts
}

func (k *killer) run(ctx context.Context, r *rand.Rand, driversDone <-chan struct{}) {
	for i, pt := range k.points {
		if !k.prog.waitFor(ctx, pt, driversDone) {
			return
		}
		var jitter time.Duration
		if k.maxJitter > 0 {
			jitter = time.Duration(r.Int64N(int64(k.maxJitter) + 1))
		}
		t := time.NewTimer(jitter)
		select {
		case <-t.C:
		case <-driversDone:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			return
		}
		rec := kill{N: i + 1, At: time.Now()}
		k.prog.mu.Lock()
		rec.AtCalls = k.prog.n
		k.prog.mu.Unlock()
		var err error
		if k.temporal {
			err = k.st.restartTemporal(ctx)
		} else {
			err = k.st.killServer()
		}
		if err == nil {
			err = k.st.awaitHealthy(ctx)
		}
		rec.Down = time.Since(rec.At)
		if err != nil {
			rec.Err = err.Error()
			k.st.log.Error("kill/restart failed", "kill", rec.N, "err", err)
		} else {
			k.st.log.Info("crashed and restarted", "kill", rec.N, "temporal", k.temporal, "after_calls", rec.AtCalls, "down", rec.Down.Round(time.Millisecond))
		}
		k.kills = append(k.kills, rec)
		if err != nil {
			return
		}
	}
}
