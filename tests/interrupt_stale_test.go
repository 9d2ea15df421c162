package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/workflows"
)

// TestInterruptPausedTurnAfterItsResume: an interrupt that the workflow
// took while a turn was paused on a client tool is stored only after the
// driver resumed that turn with the tool's result (the chaos campaign's
// finding 1; a workflow task that timed out while its InterruptTurn local
// activity wrote on can do this). It must store
// nothing: the turn's tool_use already has its result, and a second
// tool_result would answer no tool_use, which a real provider refuses on
// every later turn. The strict fake accepts the next turn, and an
// interrupt without a turnId then finds no turn to stop.
func TestInterruptPausedTurnAfterItsResume(t *testing.T) {
	var parts *app.Parts
	e := newEnvWith(t, envOpts{}, func(p *app.Parts) error {
		parts = p
		return nil
	})
	e.fake.Strict(true)
	pid := e.srv.Profile(t, map[string]any{
		"name":             fmt.Sprintf("interrupt-%d", profileSeq.Add(1)),
		"primary_provider": "primary",
		"allowed_tools":    []string{"get_time"},
	})
	require.NotNil(t, parts)
	d := e.openOn(pid, map[string]any{"tools": []any{tool("get_time")}})
	d.register()

	e.fake.Lane("primary").Enqueue(fakeprovider.Text("let me look").WithToolUse("tu_p", "get_time", nil))
	_, term := d.send("what time?")
	require.Nil(t, term["error"])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, err := parts.Engine.Control(ctx, d.sid)
	require.NoError(t, err)
	require.NotNil(t, v.Paused)
	paused := v.Paused.TurnID

	// The driver resumes the paused turn; its turn completes.
	e.fake.Lane("primary").Enqueue(fakeprovider.Text("it is noon"))
	_, term = d.send([]any{map[string]any{"type": "tool_result", "tool_use_id": "tu_p", "content": "12:00"}})
	require.Nil(t, term["error"], "%v", term["error"])
	assert.Equal(t, "it is noon", firstText(message(term)))

	// The interrupt the workflow took while the turn was paused lands now.
	res, err := parts.Activities.InterruptTurn(ctx, workflows.InterruptTurnInput{
		TurnRef: workflows.TurnRef{SessionID: d.sid, TurnID: paused, ClientKeyID: d.keyID},
		By:      d.keyID, Paused: true,
	})
	require.NoError(t, err)
	assert.True(t, res.NotPaused, "the resumed turn was closed as if still paused: %+v", res)

	evs := d.allEvents()
	assert.Empty(t, ofTypeIn(evs, "server.message.interrupted"), "a resumed turn was interrupted")
	perUse := map[string]int{}
	for _, r := range ofTypeIn(evs, "tool.result") {
		id, _ := payload(r)["tool_use_id"].(string)
		perUse[id]++
	}
	assert.Equal(t, map[string]int{"tu_p": 1}, perUse, "one tool_result per tool_use")

	// No turn runs or is paused: an interrupt naming none stops nothing.
	res2 := result(t, d.call("session.interrupt", map[string]any{}))
	assert.Equal(t, false, res2["interrupted"])
	assert.Nil(t, res2["turnId"])

	requireValidNextTurn(t, e, d, "primary")
}
