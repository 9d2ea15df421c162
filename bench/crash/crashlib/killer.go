package crashlib

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// Kill points: where in a turn a kill is aimed. Each is observed, not timed:
// the killer arms the point and fires when an observer reports it.
const (
	// PointRandom kills after a random number of finished calls plus a
	// random jitter: anywhere.
	PointRandom = "random"
	// PointAccept kills the moment a client sees the 200 of a message.
	PointAccept = "accept"
	// PointResume kills the moment a client sees the 200 of a tool_result
	// continuation (a paused turn being resumed).
	PointResume = "resume"
	// PointProvider kills while the fake provider holds a request.
	PointProvider = "provider"
	// PointSandbox kills while a sandbox command runs in its container
	// (its counter line is written, it has not finished).
	PointSandbox = "sandbox"
	// PointMCP kills while the MCP server runs a call.
	PointMCP = "mcp"
	// pointOutage is what a database outage waits for: a provider call in
	// flight, so the outage falls mid-turn.
	pointOutage = "outage"
)

// KillPoints lists every kill point, in report order.
var KillPoints = []string{PointRandom, PointAccept, PointResume, PointProvider, PointSandbox, PointMCP}

// aimer connects observers of the run (the fake provider, the MCP server,
// the client's transport and event hook) to the killer: the killer arms one
// point at a time, and the first observer to see it fires it.
type aimer struct {
	mu    sync.Mutex
	point string
	fired chan struct{}
}

func (a *aimer) arm(point string) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.point, a.fired = point, make(chan struct{})
	return a.fired
}

func (a *aimer) disarm() {
	a.mu.Lock()
	a.point, a.fired = "", nil
	a.mu.Unlock()
}

// armed reports whether point is armed, without firing it.
func (a *aimer) armed(point string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.point == point
}

// hit fires point if it is armed and reports whether it did.
func (a *aimer) hit(point string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.point != point {
		return false
	}
	close(a.fired)
	a.point, a.fired = "", nil
	return true
}

// chaosEvent is one crash or database outage the run inflicted.
type chaosEvent struct {
	N     int
	Point string        // a kill point, or "" for an outage
	Down  time.Duration // an outage's length (0 for a kill)
	At    time.Time     // the kill signal, or the start of the outage
	End   time.Time     // both ports healthy again, or the end of the outage
	// Missed is set when the aimed point was not observed in time and the
	// event fired at a random moment instead.
	Missed  bool
	AtCalls int
	Err     string
}

// row is the report row the event counts in.
func (e chaosEvent) row() string {
	if e.Point == "" {
		return "db outage " + e.Down.String()
	}
	if e.Missed {
		return "kill " + PointRandom
	}
	return "kill " + e.Point
}

// killer inflicts the planned events one after another: each waits for a
// number of finished calls (drawn at random, so events spread over the
// run), then for its point, then crashes baesrv (or restarts Temporal) or
// cuts PostgreSQL for its length.
type killer struct {
	st        *stack
	prog      *progress
	aim       *aimer
	plan      []chaosEvent
	points    []int
	maxJitter time.Duration
	aimWithin time.Duration
	temporal  bool
	done      []chaosEvent
}

// planChaos lays out kills (aimed at points in turn) and outages, shuffled,
// at sorted random call counts in [1, 0.8*total], so the last ones are due
// well before the drivers run out of work.
func planChaos(r *rand.Rand, kills int, points []string, outages []time.Duration, total int) ([]chaosEvent, []int) {
	var plan []chaosEvent
	for i := range kills {
		plan = append(plan, chaosEvent{Point: points[i%len(points)]})
	}
	for _, d := range outages {
		plan = append(plan, chaosEvent{Down: d})
	}
	r.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	hi := max(1, total*8/10)
	pts := make([]int, len(plan))
	for i := range pts {
		pts[i] = 1 + r.IntN(hi)
	}
	slices.Sort(pts)
	return plan, pts
}

func (k *killer) run(ctx context.Context, r *rand.Rand, driversDone <-chan struct{}) {
	for i, ev := range k.plan {
		if !k.prog.waitFor(ctx, k.points[i], driversDone) {
			return
		}
		ev.N = i + 1
		if !k.await(ctx, r, &ev, driversDone) {
			return
		}
		ev.At = time.Now()
		k.prog.mu.Lock()
		ev.AtCalls = k.prog.n
		k.prog.mu.Unlock()
		var err error
		switch {
		case ev.Point == "":
			k.st.proxy.Down()
			k.st.log.Info("database outage", "event", ev.N, "for", ev.Down)
			t := time.NewTimer(ev.Down) // the outage's length is the experiment
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
			k.st.proxy.Up()
		case k.temporal:
			err = k.st.restartTemporal(ctx)
		default:
			err = k.st.killServer()
		}
		if err == nil && ev.Point != "" {
			err = k.st.awaitHealthy(ctx)
		}
		ev.End = time.Now()
		if err != nil {
			ev.Err = err.Error()
			k.st.log.Error("chaos event failed", "event", ev.N, "err", err)
		} else {
			k.st.log.Info("chaos event done", "event", ev.N, "row", ev.row(), "after_calls", ev.AtCalls, "took", ev.End.Sub(ev.At).Round(time.Millisecond))
		}
		k.done = append(k.done, ev)
		if err != nil || ctx.Err() != nil {
			return
		}
	}
}

// await waits for the event's point: a random jitter for random kills, an
// observation otherwise (falling back to now, marked Missed, when the point
// does not come within aimWithin). false: the run ended first.
func (k *killer) await(ctx context.Context, r *rand.Rand, ev *chaosEvent, driversDone <-chan struct{}) bool {
	point := ev.Point
	if point == "" {
		point = pointOutage
	}
	if point == PointRandom {
		var jitter time.Duration
		if k.maxJitter > 0 {
			jitter = time.Duration(r.Int64N(int64(k.maxJitter) + 1))
		}
		t := time.NewTimer(jitter)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-driversDone:
		case <-ctx.Done():
		}
		return false
	}
	fired := k.aim.arm(point)
	defer k.aim.disarm()
	t := time.NewTimer(k.aimWithin)
	defer t.Stop()
	select {
	case <-fired:
		return true
	case <-t.C:
		ev.Missed = true
		k.st.log.Warn("aimed point not observed in time; firing now", "event", ev.N, "point", point, "within", k.aimWithin)
		return true
	case <-driversDone:
	case <-ctx.Done():
	}
	return false
}

func (e chaosEvent) String() string {
	if e.Point == "" {
		return fmt.Sprintf("event %d (outage %s)", e.N, e.Down)
	}
	return fmt.Sprintf("event %d (kill at %s)", e.N, e.Point)
}
