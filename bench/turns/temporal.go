package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/bae-go/bae-go/bench/temporalfloor"

	"github.com/bae-go/bae-go/bench/benchstack"
)

// temporalAlone is the Temporal round trip of a turn with nothing else in
// it (bench/temporalfloor), measured with bae-go's load on the bench's
// Temporal server (embedded, or the external one of -temporal) after the
// floor's phase: added to the floor's
// latency it is the least a turn that is an Update can take here.
type temporalAlone struct {
	Completed int             `json:"completed"`
	PerSecond float64         `json:"updates_per_s"`
	Latency   benchstack.Dist `json:"latency"`
	CPU       CPUStats        `json:"cpu"`
	Err       string          `json:"error,omitempty"`
}

func runTemporalAlone(ctx context.Context, log *slog.Logger, o options, st *stack, pg *pgSampler) (*temporalAlone, error) {
	turns := o.turns
	if o.duration > 0 {
		// As many as -duration would take at the offered rate, or as the
		// floor's closed loop would: at most 40 each.
		turns = 40
		if o.rate > 0 {
			turns = max(1, int(o.duration.Seconds()*o.rate)/o.sessions)
		}
	}
	w, err := temporalfloor.StartWorker(st.Temporal)
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	log.Info("measuring Temporal alone", "workflows", o.sessions, "updates_per_workflow", turns, "rate", o.rate)
	var start cpuMark
	res, err := temporalfloor.Run(ctx, st.Temporal, temporalfloor.Load{
		Sessions: o.sessions, Warmup: o.warmup, Turns: turns, Rate: o.rate, Prefix: fmt.Sprintf("bench-%d-", time.Now().UnixNano()),
		Measuring: func() { start = markCPU(nil, st.procs(ctx, pg)) },
	})
	t := &temporalAlone{Completed: len(res.Latencies), PerSecond: res.PerSecond(), Latency: benchstack.Summarise(res.Latencies), CPU: cpuBetween(start, markCPU(nil, st.procs(context.WithoutCancel(ctx), pg)))}
	t.CPU.perTurn(res.Elapsed.Seconds(), t.Completed)
	if err != nil {
		t.Err = err.Error()
	}
	return t, err
}
