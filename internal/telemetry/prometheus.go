package telemetry

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// newPrometheus builds a pull reader on a registry of its own (never the
// process-global default one) and the handler that serves it. Names keep
// no unit suffix, so each is its OTel name with "_" for "." (and "_total"
// on counters): bae.sessions.open is bae_sessions_open, not
// bae_sessions_open_ratio. The Go runtime's and the process's own
// collectors (go_goroutines, go_memstats_*, process_resident_memory_bytes)
// are served beside them, so a leak shows on the scrape that watches
// everything else.
func newPrometheus() (sdkmetric.Reader, http.Handler, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutUnits())
	if err != nil {
		return nil, nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	return exp, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
}
