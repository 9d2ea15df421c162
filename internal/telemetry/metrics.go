package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"

	"github.com/bae-go/bae-go/events"
	"github.com/bae-go/bae-go/store"
)

// Instrument names (the closed set of config.MetricNames).
const (
	MetricSessionsOpen      = "bae.sessions.open"
	MetricSessionsTotal     = "bae.sessions.total"
	MetricEventsTotal       = "bae.events.total"
	MetricProfilesCount     = "bae.profiles.count"
	MetricKeysCount         = "bae.keys.count"
	MetricMCPSessionsLive   = "bae.mcp.sessions.live"
	MetricTurnsPending      = "bae.turns.pending"
	MetricSandboxesLive     = "bae.sandboxes.live"
	MetricSubagentsActive   = "bae.subagents.active"
	MetricDriversRegistered = "bae.drivers.registered"
	MetricTurnsCompleted    = "bae.turns.completed"
	MetricProviderRequests  = "bae.provider.requests"
	MetricProviderLatency   = "bae.provider.latency"
	MetricToolCalls         = "bae.tool.calls"
	MetricToolLatency       = "bae.tool.latency"
	MetricSandboxesReaped   = "bae.sandboxes.reaped"
	MetricProviderTokens    = "bae.provider.tokens"
	MetricProviderCost      = "bae.provider.cost"
	MetricApprovalsPending  = "bae.approvals.pending"
	MetricApprovalWait      = "bae.approval.wait"
)

// Metrics records the bae.* instruments at the turn, provider and tool
// boundaries. Attribute values come from small closed sets (outcome,
// provider kind, dispatch); no session, key or tool identifiers. A nil
// *Metrics records nothing.
type Metrics struct {
	meter    metric.Meter
	disabled []string
	log      *slog.Logger

	turnsCompleted   metric.Int64Counter
	providerRequests metric.Int64Counter
	providerLatency  metric.Float64Histogram
	toolCalls        metric.Int64Counter
	toolLatency      metric.Float64Histogram
	sandboxesReaped  metric.Int64Counter
	providerTokens   metric.Int64Counter
	providerCost     metric.Float64Counter
	approvalWait     metric.Float64Histogram
}

// NewMetrics creates the instruments on mp; names in disabled get no-op
// instruments, so recording sites never re-check the configuration.
func NewMetrics(mp metric.MeterProvider, disabled []string, log *slog.Logger) (*Metrics, error) {
	m := &Metrics{meter: mp.Meter(ScopeName), disabled: disabled, log: log}
	var err error
	if m.turnsCompleted, err = m.meterFor(MetricTurnsCompleted).Int64Counter(MetricTurnsCompleted,
		metric.WithUnit("1"), metric.WithDescription("Turns that ran, by outcome (completed, paused, providers_failed).")); err != nil {
		return nil, fmt.Errorf("instrument %s: %w", MetricTurnsCompleted, err)
	}
	if m.providerRequests, err = m.meterFor(MetricProviderRequests).Int64Counter(MetricProviderRequests,
		metric.WithUnit("1"), metric.WithDescription("Provider HTTP calls, by provider kind and outcome (ok, error).")); err != nil {
		return nil, fmt.Errorf("instrument %s: %w", MetricProviderRequests, err)
	}
	if m.providerLatency, err = m.meterFor(MetricProviderLatency).Float64Histogram(MetricProviderLatency,
		metric.WithUnit("ms"), metric.WithDescription("Provider HTTP call latency, by provider kind.")); err != nil {
		return nil, fmt.Errorf("instrument %s: %w", MetricProviderLatency, err)
	}
	if m.toolCalls, err = m.meterFor(MetricToolCalls).Int64Counter(MetricToolCalls,
		metric.WithUnit("1"), metric.WithDescription("tool_use blocks dispatched, by dispatch (client, mcp, sandbox, subagent).")); err != nil {
		return nil, fmt.Errorf("instrument %s: %w", MetricToolCalls, err)
	}
	if m.toolLatency, err = m.meterFor(MetricToolLatency).Float64Histogram(MetricToolLatency,
		metric.WithUnit("ms"), metric.WithDescription("Server-side tool execution latency, by dispatch.")); err != nil {
		return nil, fmt.Errorf("instrument %s: %w", MetricToolLatency, err)
	}
	if m.sandboxesReaped, err = m.meterFor(MetricSandboxesReaped).Int64Counter(MetricSandboxesReaped,
		metric.WithUnit("1"), metric.WithDescription("Sandbox containers of this deployment removed by this replica's sweep because their session was not open, by reason (session_ended, session_unknown, no_session).")); err != nil {
		return nil, fmt.Errorf("instrument %s: %w", MetricSandboxesReaped, err)
	}
	if m.providerTokens, err = m.meterFor(MetricProviderTokens).Int64Counter(MetricProviderTokens,
		metric.WithUnit("1"), metric.WithDescription("Tokens provider calls used, by provider entry and type (input, output, cache_read, cache_write).")); err != nil {
		return nil, fmt.Errorf("instrument %s: %w", MetricProviderTokens, err)
	}
	if m.providerCost, err = m.meterFor(MetricProviderCost).Float64Counter(MetricProviderCost,
		metric.WithUnit("{USD}"), metric.WithDescription("What provider calls cost, in USD, at their entry's price table, by provider entry.")); err != nil {
		return nil, fmt.Errorf("instrument %s: %w", MetricProviderCost, err)
	}
	if m.approvalWait, err = m.meterFor(MetricApprovalWait).Float64Histogram(MetricApprovalWait,
		metric.WithUnit("s"), metric.WithDescription("How long a held server-side tool call waited for its decision, by decision (approved, rejected, expired, cancelled).")); err != nil {
		return nil, fmt.Errorf("instrument %s: %w", MetricApprovalWait, err)
	}
	return m, nil
}

func (m *Metrics) meterFor(name string) metric.Meter {
	if slices.Contains(m.disabled, name) {
		return metricnoop.Meter{}
	}
	return m.meter
}

// TurnCompleted counts a turn that ran to an outcome.
func (m *Metrics) TurnCompleted(ctx context.Context, outcome string) {
	if m == nil {
		return
	}
	m.turnsCompleted.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", outcome)))
}

// ProviderRequest records one provider HTTP call; outcome is "ok" or "error".
func (m *Metrics) ProviderRequest(ctx context.Context, provider, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	p := attribute.String("provider", provider)
	m.providerRequests.Add(ctx, 1, metric.WithAttributes(p, attribute.String("outcome", outcome)))
	m.providerLatency.Record(ctx, ms(d), metric.WithAttributes(p))
}

// ProviderUsage counts one answered call's tokens and cost (in
// nano-dollars) under its provider entry's registry name, a closed set.
func (m *Metrics) ProviderUsage(ctx context.Context, entry string, input, output, cacheRead, cacheWrite, costNanoUSD int64) {
	if m == nil {
		return
	}
	p := attribute.String("provider", entry)
	// Zeros too, so every series exists from the entry's first call.
	for _, t := range []struct {
		kind string
		n    int64
	}{{"input", input}, {"output", output}, {"cache_read", cacheRead}, {"cache_write", cacheWrite}} {
		m.providerTokens.Add(ctx, t.n, metric.WithAttributes(p, attribute.String("type", t.kind)))
	}
	m.providerCost.Add(ctx, float64(costNanoUSD)/1e9, metric.WithAttributes(p))
}

// ToolCall counts one dispatched tool_use block.
func (m *Metrics) ToolCall(ctx context.Context, dispatch events.Dispatch) {
	if m == nil {
		return
	}
	m.toolCalls.Add(ctx, 1, metric.WithAttributes(attribute.String("dispatch", string(dispatch))))
}

// ToolLatency records how long a server-side tool took.
func (m *Metrics) ToolLatency(ctx context.Context, dispatch events.Dispatch, d time.Duration) {
	if m == nil {
		return
	}
	m.toolLatency.Record(ctx, ms(d), metric.WithAttributes(attribute.String("dispatch", string(dispatch))))
}

// SandboxesReaped counts n sandbox containers the sweep removed for reason
// (a sandbox.ReapReason). Adding 0 makes the series exist before the first
// removal, so that "none yet" reads as 0 rather than as absent.
func (m *Metrics) SandboxesReaped(ctx context.Context, reason string, n int64) {
	if m == nil {
		return
	}
	m.sandboxesReaped.Add(ctx, n, metric.WithAttributes(attribute.String("reason", reason)))
}

// ApprovalWait records how long a held call waited for its decision.
func (m *Metrics) ApprovalWait(ctx context.Context, decision events.Decision, d time.Duration) {
	if m == nil {
		return
	}
	m.approvalWait.Record(ctx, d.Seconds(), metric.WithAttributes(attribute.String("decision", string(decision))))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// CountSource reports deployment-wide totals (*store.Store does).
type CountSource interface {
	ActivityCounts(ctx context.Context) (store.ActivityCounts, error)
}

// countsTimeout bounds the gauge query one collection runs.
const countsTimeout = 5 * time.Second

// ObserveCounts registers the store-backed gauges. They are read when the
// reader collects (one query for all of them), not on any timer of ours.
// Every replica reports the same deployment-wide values.
func (m *Metrics) ObserveCounts(src CountSource) error {
	if m == nil {
		return nil
	}
	gauges := []struct {
		name, desc string
		value      func(store.ActivityCounts) int64
	}{
		{MetricSessionsOpen, "Sessions in state open.", func(c store.ActivityCounts) int64 { return c.OpenSessions }},
		{MetricSessionsTotal, "Sessions ever created, any state.", func(c store.ActivityCounts) int64 { return c.TotalSessions }},
		{MetricEventsTotal, "Events in the log, all sessions.", func(c store.ActivityCounts) int64 { return c.Events }},
		{MetricProfilesCount, "Live profiles.", func(c store.ActivityCounts) int64 { return c.Profiles }},
		{MetricKeysCount, "Live client keys.", func(c store.ActivityCounts) int64 { return c.ClientKeys }},
		{MetricTurnsPending, "Open sessions with a turn paused for client tool results.", func(c store.ActivityCounts) int64 { return c.PendingTurns }},
		{MetricSandboxesLive, "Open sessions with a remote sandbox.", func(c store.ActivityCounts) int64 { return c.LiveSandboxes }},
		{MetricSubagentsActive, "Remote subagents running.", func(c store.ActivityCounts) int64 { return c.ActiveSubagents }},
		{MetricDriversRegistered, "Registered drivers on open sessions.", func(c store.ActivityCounts) int64 { return c.Drivers }},
		{MetricApprovalsPending, "Held server-side tool calls waiting for a decision.", func(c store.ActivityCounts) int64 { return c.PendingApprovals }},
	}
	type live struct {
		g     metric.Int64ObservableGauge
		value func(store.ActivityCounts) int64
	}
	var active []live
	var insts []metric.Observable
	for _, g := range gauges {
		if slices.Contains(m.disabled, g.name) {
			continue
		}
		inst, err := m.meter.Int64ObservableGauge(g.name, metric.WithUnit("1"), metric.WithDescription(g.desc))
		if err != nil {
			return fmt.Errorf("instrument %s: %w", g.name, err)
		}
		active = append(active, live{inst, g.value})
		insts = append(insts, inst)
	}
	if len(active) == 0 {
		return nil
	}
	h := newHealth(m.log, "gauges")
	var mu sync.Mutex // collections may overlap (shutdown flush vs. periodic)
	_, err := m.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		mu.Lock()
		defer mu.Unlock()
		ctx, cancel := context.WithTimeout(ctx, countsTimeout)
		defer cancel()
		c, err := src.ActivityCounts(ctx)
		h.observe(err)
		if err != nil {
			// Omitted rather than reported as zero.
			return nil
		}
		for _, a := range active {
			o.ObserveInt64(a.g, a.value(c))
		}
		return nil
	}, insts...)
	if err != nil {
		return fmt.Errorf("register gauge callback: %w", err)
	}
	return nil
}

// ObserveMCPSessions registers bae.mcp.sessions.live. MCP connections live
// in each replica, so unlike the store-backed gauges this one is per
// process: sum it across replicas.
func (m *Metrics) ObserveMCPSessions(live func() int) error {
	if m == nil || slices.Contains(m.disabled, MetricMCPSessionsLive) {
		return nil
	}
	_, err := m.meter.Int64ObservableGauge(MetricMCPSessionsLive, metric.WithUnit("1"),
		metric.WithDescription("Sessions with at least one open MCP connection in this process."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(int64(live()))
			return nil
		}))
	if err != nil {
		return fmt.Errorf("instrument %s: %w", MetricMCPSessionsLive, err)
	}
	return nil
}
