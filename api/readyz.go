package api

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// readyTimeout bounds each dependency check of /readyz.
const readyTimeout = 2 * time.Second

// readyz reports whether this replica can serve turns: PostgreSQL and
// Temporal both answer. /healthz only says the process is up (the contract's
// liveness probe); a load balancer should route by /readyz.
func (d *Deps) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	checks := map[string]func(context.Context) error{
		"database": func(ctx context.Context) error { return d.Store.Pool.Ping(ctx) },
		"temporal": d.Engine.Ready,
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	result := map[string]string{}
	ready := true
	for name, check := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status := "ok"
			if err := check(ctx); err != nil {
				d.Log.Warn("readiness check failed", "dependency", name, "err", err)
				status = "unavailable"
			}
			mu.Lock()
			defer mu.Unlock()
			result[name] = status
			ready = ready && status == "ok"
		}()
	}
	wg.Wait()
	status := http.StatusOK
	if !ready {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, map[string]any{"ready": ready, "checks": result})
}
