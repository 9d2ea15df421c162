package tests

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/telemetry"
)

// TestTelemetryForkLinksSource: a fork's bae.session span names its source
// and the last event it inherited (bae.session.forked_from,
// bae.session.forked_event_seq); a session that is not a fork carries
// neither; the session.rewind request span counts what it rewound.
func TestTelemetryForkLinksSource(t *testing.T) {
	rcv := startOTLPReceiver(t)
	tel := otlpTelemetry(t, rcv, nil)
	e := newEnv(t, envOpts{telemetry: tel})
	d := e.open()
	_, term := d.send("one")
	require.Nil(t, term["error"])
	f, res := d.forkOf(map[string]any{})
	at := int64(res["forked_from"].(map[string]any)["event_seq"].(float64))
	_, term = f.send("two")
	require.Nil(t, term["error"])
	_, term = f.send("three")
	require.Nil(t, term["error"])
	f.rewindOf(map[string]any{"turn_id": turnIDs(t, e, f.sid)[1]})
	f.closeSession()
	d.closeSession()

	rcv.flushUntil(t, tel, named(telemetry.SpanSession, telemetry.AttrSessionID, d.sid), "the source's session span")
	rcv.flushUntil(t, tel, named(telemetry.SpanSession, telemetry.AttrSessionID, f.sid), "the fork's session span")
	rewind := named("POST /api/v1/sessions/{id}/rpc", "rpc.method", "session.rewind", telemetry.AttrSessionID, f.sid)
	// A request's span ends after its response is written.
	rcv.flushUntil(t, tel, rewind, "the rewind request's span")
	fs := rcv.one(t, "fork span", named(telemetry.SpanSession, telemetry.AttrSessionID, f.sid))
	assert.Equal(t, d.sid, fs.attr(telemetry.AttrForkedFrom))
	assert.Equal(t, strconv.FormatInt(at, 10), fs.attr(telemetry.AttrForkedEventSeq))
	src := rcv.one(t, "source span", named(telemetry.SpanSession, telemetry.AttrSessionID, d.sid))
	assert.Empty(t, src.attr(telemetry.AttrForkedFrom))

	rw := rcv.one(t, "rewind request span", rewind)
	assert.Equal(t, "1", rw.attr("bae.rewind.turns"))
	assert.Equal(t, "0", rw.attr("bae.rewind.tool_calls"))
}
