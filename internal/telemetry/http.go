package telemetry

import (
	"context"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/bae-go/bae-go/internal/lib/httpstatus"
)

// HTTP wraps a router so each request gets a server span (scope baesrv)
// named "{METHOD} {route}", parented on an incoming W3C
// traceparent/tracestate when one is valid (a malformed one is ignored, as
// the W3C spec says). /healthz gets none. Nothing is written to the
// response. With tracing off the router is returned as is.
func (t *Telemetry) HTTP(h http.Handler) http.Handler {
	if !t.traces {
		return h
	}
	tracer := t.TracerProvider.Tracer(ScopeName)
	routes, _ := h.(chi.Routes)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			h.ServeHTTP(w, r)
			return
		}
		ctx := t.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tracer.Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			attribute.String(AttrHTTPMethod, r.Method),
			attribute.String(AttrURLPath, r.URL.Path),
		))
		defer span.End()
		// chi reuses a routing context it finds in the request, so handing it
		// one lets us read the matched pattern once the router is done.
		rctx := chi.NewRouteContext()
		rctx.Routes = routes
		sw := httpstatus.Wrap(w)
		h.ServeHTTP(sw, r.WithContext(context.WithValue(ctx, chi.RouteCtxKey, rctx)))
		if p := rctx.RoutePattern(); p != "" {
			span.SetName(r.Method + " " + p)
			span.SetAttributes(attribute.String(AttrHTTPRoute, p))
		}
		status := sw.Status
		if status == 0 {
			status = http.StatusOK
		}
		span.SetAttributes(attribute.Int(AttrHTTPStatus, status))
		if status >= 500 {
			span.SetStatus(codes.Error, fmt.Sprintf("HTTP %d", status))
		}
	})
}
