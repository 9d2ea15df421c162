// Package sdk is the Go client harness for the Better Agent Engine (BAE)
// client API, as served by baesrv.
//
// A harness opens (Connect) or joins (Join) a session, declares the
// client-side tools it implements, and drives turns with Send, which runs
// the tool-call loop: the server pauses a turn whenever the model asks for a
// tool this client declared, Send runs the tool's handler and posts the
// tool_result back, until the model answers with a final assistant turn.
//
//	cfg := sdk.ConfigFromEnv()
//	s, err := sdk.Connect(ctx, cfg, sdk.WithTool(sdk.Tool{
//		Name:        "get_current_time",
//		Description: "Return the current UTC time.",
//		Handler: func(ctx context.Context, _ json.RawMessage) (any, error) {
//			return time.Now().UTC().Format(time.RFC3339), nil
//		},
//	}))
//	if err != nil { ... }
//	defer s.Close(context.WithoutCancel(ctx))
//	reply, err := s.Send(ctx, "What time is it?")
//	fmt.Println(reply.Text())
//
// Observers use Subscribe (a live iterator over session events) and Events
// (the persisted history, all pages). Builtin tools — scoped file access,
// sandboxed shells and CLI subagents — live in the tools sub-package.
//
// Every call that does I/O takes a context; cancelling it aborts the
// in-flight HTTP exchange and the call returns ctx.Err(). When the context
// carries an OpenTelemetry span, requests carry a W3C traceparent header and
// Send/tool dispatch are recorded as bae.client.send / bae.client.tool spans
// through Config.TracerProvider (default: the global provider, a no-op unless
// the application installs an OpenTelemetry SDK).
package sdk
