package crashlib

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/internal/provider"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/sdk"
)

const (
	probeTool  = "crash_probe"
	toolMarker = "[probe]"
	// abandonedText is what the server writes for a client call that was
	// never answered (activities.abandonedText).
	abandonedText = "Client tool call was abandoned before returning a result."
	// callTimeout is how long a client waits on one open stream before it
	// resends (under the same Idempotency-Key) instead.
	callTimeout = 3 * time.Minute
	// resendPause is the client's pause before it resends a message whose
	// outcome it could not learn (the SDK has backed off already).
	resendPause = 500 * time.Millisecond
	// providerHold is how long the fake holds a request a kill is aimed at
	// (the kill comes at once; the hold only keeps the call in flight), and
	// outageHold one an outage is aimed at, so the outage starts mid-call
	// and the answer arrives during it.
	providerHold = 2 * time.Second
	outageHold   = 300 * time.Millisecond
)

// Message markers the fake provider answers with a tool call: the tag
// names the turn's counter (sandbox) or call id (MCP).
var (
	sandboxMarkerRe = regexp.MustCompile(`\[sh:([A-Za-z0-9-]+)\]`)
	mcpMarkerRe     = regexp.MustCompile(`\[mcp:([A-Za-z0-9-]+)\]`)
)

// callKind is what a sendMessage call carries.
type callKind string

const (
	kindPlain    callKind = "plain"       // a text message; expects "echo: <text>"
	kindTool     callKind = "tool"        // a text message the fake answers with a client tool_use
	kindContinue callKind = "tool-result" // the tool_result continuation of a paused turn
	kindSandbox  callKind = "sandbox"     // an Auto-mode sandbox tool round, then "echo: <text>"
	kindMCP      callKind = "mcp"         // an MCP tool round, then "echo: <text>"
	kindFinal    callKind = "final"       // each session's last plain message
)

// providerRounds is how many provider request/response pairs a turn of
// kind makes: server tools add a second round.
func (k callKind) providerRounds() int {
	if k == kindSandbox || k == kindMCP {
		return 2
	}
	return 1
}

// matchKey identifies a message in the log: its unique text, or for a
// continuation the tool_use id its tool_result answers.
type matchKey struct {
	Text      string
	ToolUseID string
}

func (k matchKey) String() string {
	if k.ToolUseID != "" {
		return "tool_result for " + k.ToolUseID
	}
	return fmt.Sprintf("%q", k.Text)
}

// call is one message as the client saw it, over all its sends.
type call struct {
	Session    int
	Turn       int
	Kind       callKind
	Abandon    bool   // a tool turn the client leaves unanswered on purpose
	Tag        string // the sandbox counter / MCP call id of a server-tool turn
	Key        matchKey
	IdemKey    string
	ExpectText string // the echo the reply must carry; "" for kindTool
	Start, End time.Time
	// Sends counts HTTP requests (the SDK's resends included); Resends the
	// client's own resends after the SDK gave up.
	Sends, Resends int
	ErrTerm        *sdk.RPCError // a definite JSON-RPC error terminal
	TurnFailed     bool          // the terminal said the turn failed
	Lost           string        // why the client never got a terminal result
	Wrong          string        // the reply did not match what was sent
	Terminal       json.RawMessage
	LastErr        string // the last error before the terminal result
	MCPCalls       int    // calls the MCP server saw for this turn, when more than one
}

// turnKind is what one planned user turn does.
type turnKind int

const (
	turnPlain turnKind = iota
	turnProbe          // client tool round trip
	turnSandbox
	turnMCP
)

// turnPlan is one user turn; a probe's continuation the client may
// deliberately never send.
type turnPlan struct {
	kind    turnKind
	abandon bool
}

// driver drives one session's turns in order, as a single client would.
type driver struct {
	n      int
	sess   *sdk.Session
	st     *stack
	sb     *sandboxes
	aim    *aimer
	box    string // the session's sandbox container
	runID  string
	plan   []turnPlan
	within time.Duration
	prog   *progress

	mu    sync.Mutex
	calls []*call
	// stopped is set when the server rejected a call outright; the driver
	// sends nothing more.
	stopped bool
}

func (d *driver) record(c *call) {
	d.mu.Lock()
	d.calls = append(d.calls, c)
	d.mu.Unlock()
	d.prog.inc()
}

func (d *driver) snapshot() []*call {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*call(nil), d.calls...)
}

func (d *driver) run(ctx context.Context) {
	for j, p := range d.plan {
		if d.stopped || ctx.Err() != nil {
			return
		}
		text := fmt.Sprintf("crash %s s%d t%03d", d.runID, d.n, j)
		tag := fmt.Sprintf("s%dt%03d", d.n, j)
		switch p.kind {
		case turnPlain:
			d.send(ctx, j, kindPlain, text, "", "echo: "+text)
		case turnSandbox:
			text += " [sh:" + tag + "]"
			d.send(ctx, j, kindSandbox, text, tag, "echo: "+text)
		case turnMCP:
			text += " [mcp:" + tag + "]"
			d.send(ctx, j, kindMCP, text, tag, "echo: "+text)
		case turnProbe:
			text += " " + toolMarker
			c := d.send(ctx, j, kindTool, text, "", "")
			c.Abandon = p.abandon
			id := clientToolUseID(c.Terminal)
			if id == "" || p.abandon {
				// No pause to answer (the reply is lost or wrong), or a client
				// that never answers: the next message abandons the pause.
				continue
			}
			result := []sdk.Block{sdk.ToolResult{ToolUseID: id, Content: []sdk.Block{sdk.Text{Text: "probe " + id + " ok"}}}}
			d.sendContent(ctx, j, kindContinue, result, matchKey{ToolUseID: id}, "", "echo: "+text)
		}
	}
	if d.stopped || ctx.Err() != nil {
		return
	}
	text := fmt.Sprintf("crash %s s%d final", d.runID, d.n)
	d.send(ctx, len(d.plan), kindFinal, text, "", "echo: "+text)
}

func (d *driver) send(ctx context.Context, turn int, kind callKind, text, tag, expect string) *call {
	return d.sendContent(ctx, turn, kind, text, matchKey{Text: text}, tag, expect)
}

// sendContent sends one message until the client holds its terminal
// result: every send carries the message's Idempotency-Key, so a resend
// after any failure whose outcome the client cannot know (no response, a
// broken stream, a 5xx, an "Internal error" at accept) relays the turn
// already stored instead of storing a second one.
func (d *driver) sendContent(ctx context.Context, turn int, kind callKind, content any, key matchKey, tag, expect string) *call {
	c := &call{Session: d.n, Turn: turn, Kind: kind, Key: key, Tag: tag, ExpectText: expect, Start: time.Now(),
		IdemKey: fmt.Sprintf("%s-s%d-t%03d-%s", d.runID, d.n, turn, kind)}
	defer func() {
		c.End = time.Now()
		d.record(c)
	}()
	deadline := time.Now().Add(d.within)
	for first := true; ; first = false {
		if !first {
			c.Resends++
		}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		res, err := d.sess.SendOnce(cctx, content, sdk.SendOptions{IdempotencyKey: c.IdemKey})
		cancel()
		if res != nil {
			c.Sends += res.Attempts
		} else {
			c.Sends++
		}
		if ctx.Err() != nil {
			c.Lost = "run cancelled"
			return c
		}
		if err == nil {
			c.Terminal = replyOf(res)
			break
		}
		c.LastErr = err.Error()
		if definite := d.definite(c, err); definite {
			return c
		}
		if time.Now().After(deadline) {
			c.Lost = fmt.Sprintf("no terminal result within %s (last error: %v)", d.within, err)
			return c
		}
		// If the server is down, wait for it; then resend under the key.
		if err := d.st.awaitHealthy(ctx); err != nil {
			c.Lost = "server never came back: " + err.Error()
			return c
		}
		t := time.NewTimer(resendPause)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
	if kind == kindTool {
		if clientToolUseID(c.Terminal) == "" {
			c.Wrong = "expected a client tool_use, got " + string(c.Terminal)
		}
	} else if got := benchstack.MessageText(c.Terminal); got != expect {
		c.Wrong = fmt.Sprintf("expected %q, got %q", expect, got)
	}
	return c
}

// definite classifies a failed send: true when the answer is final (the
// call is recorded as such), false when the client must resend.
func (d *driver) definite(c *call, err error) bool {
	var re *sdk.RPCError
	var pe *sdk.ProblemError
	var pf *sdk.ProvidersFailedError
	switch {
	case errors.As(err, &pf):
		c.Wrong = "all providers failed"
		return true
	case errors.As(err, &re):
		switch {
		case re.Code == sdk.CodeInternalError && strings.HasPrefix(re.Message, "Internal error: the turn failed"):
			// The turn ran and failed: its terminal result is this error.
			c.ErrTerm, c.TurnFailed = re, true
			return true
		case re.Code == sdk.CodeInternalError, re.Code == sdk.CodeApplicationError && re.Message == "session loop failed":
			// The server could not store, relay or learn the outcome: the
			// turn may or may not exist, which is what the key is for.
			return false
		}
		// A rejection (session ended, bad merge, ...): nothing more will
		// come, and later turns would be meaningless.
		c.ErrTerm = re
		c.Lost = fmt.Sprintf("rejected with %d %q", re.Code, re.Message)
		d.stopped = true
		return true
	case errors.As(err, &pe) && pe.Status < 500:
		c.Lost = err.Error()
		d.stopped = true
		return true
	}
	return false
}

// replyOf is the turn's reply as logged (the last server.message.send the
// result carries), else the result's message.
func replyOf(res *sdk.TurnResult) json.RawMessage {
	for i := len(res.Events) - 1; i >= 0; i-- {
		if res.Events[i].Type == sdk.EventServerMessageSend {
			return res.Events[i].Payload
		}
	}
	b, _ := json.Marshal(res.Message)
	return b
}

// watchSandbox runs on a live sandbox.request while a kill is aimed at
// sandbox execution: it fires the kill once the command's counter line is
// in the container, i.e. while the command runs.
func (d *driver) watchSandbox(ctx context.Context, payload json.RawMessage) {
	var p struct {
		Command string `json:"command"`
	}
	_ = json.Unmarshal(payload, &p)
	tag := counterTag(p.Command)
	if tag == "" || d.box == "" {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		for d.aim.armed(PointSandbox) && ctx.Err() == nil {
			if d.sb.hasRun(ctx, d.box, tag) {
				d.aim.hit(PointSandbox)
				return
			}
		}
	}()
}

// respond is the fake provider: a small random delay, so random kills land
// before, during and after provider calls; a tool_use for messages carrying
// a marker (the client probe, a sandbox command, an MCP call); and the hold
// a provider-aimed kill or outage needs.
func respond(maxDelay, toolFor time.Duration, aim *aimer) func(fakeprovider.Recorded) fakeprovider.Reply {
	return func(rec fakeprovider.Recorded) fakeprovider.Reply {
		var delay time.Duration
		if maxDelay > 0 {
			delay = rand.N(maxDelay + 1)
		}
		reply := fakeprovider.Echo()
		msgs := rec.Messages()
		if len(msgs) > 0 {
			last := msgs[len(msgs)-1]
			text := provider.Text(last["content"])
			if last["role"] == "user" {
				switch {
				case strings.Contains(text, toolMarker):
					reply = fakeprovider.ToolUse("", probeTool, map[string]any{"n": text})
				case sandboxMarkerRe.MatchString(text):
					tag := sandboxMarkerRe.FindStringSubmatch(text)[1]
					reply = fakeprovider.ToolUse("", sandboxTool, map[string]any{"command": sandboxCommand(tag, toolFor)})
				case mcpMarkerRe.MatchString(text):
					tag := mcpMarkerRe.FindStringSubmatch(text)[1]
					reply = fakeprovider.ToolUse("", mcpTool, map[string]any{"id": tag})
				}
			}
		}
		switch {
		case aim.hit(PointProvider):
			delay = providerHold
		case aim.hit(pointOutage):
			delay = outageHold
		}
		return reply.After(delay)
	}
}

// clientToolUseID is the id of the probe tool_use a paused reply asks the
// client to run, or "".
func clientToolUseID(msg json.RawMessage) string {
	for _, b := range benchstack.Blocks(benchstack.ContentOf(msg)) {
		if b["type"] == "tool_use" && b["name"] == probeTool && b["dispatch"] == "client" {
			id, _ := b["id"].(string)
			return id
		}
	}
	return ""
}

// matches reports whether a client.message.send payload is the message of
// key: its text (alone, or a text block after an abandonment's synthetic
// results), or a genuine tool_result for its tool_use id.
func (k matchKey) matches(payload json.RawMessage) bool {
	for _, b := range benchstack.Blocks(benchstack.ContentOf(payload)) {
		switch {
		case k.Text != "" && b["type"] == "text" && b["text"] == k.Text:
			return true
		case k.ToolUseID != "" && b["type"] == "tool_result" && b["tool_use_id"] == k.ToolUseID:
			if c, _ := b["content"].(string); c != abandonedText {
				return true
			}
		}
	}
	return false
}

// segment is one turn in the log: a client.message.send and every event up
// to the next one. One driver per session sends one message at a time, so
// turns never interleave.
type segment struct {
	cms    wireEvent
	events []wireEvent // after cms
}

func (s segment) replies() []wireEvent {
	var out []wireEvent
	for _, e := range s.events {
		if e.Type == "server.message.send" {
			out = append(out, e)
		}
	}
	return out
}

// segments splits a log into turns; events before the first message
// (session.open, registration) are dropped.
func segments(evs []wireEvent) []segment {
	var out []segment
	for _, e := range evs {
		if e.Type == "client.message.send" {
			out = append(out, segment{cms: e})
			continue
		}
		if len(out) > 0 {
			out[len(out)-1].events = append(out[len(out)-1].events, e)
		}
	}
	return out
}

// findTurn is the index of the first segment carrying key, or -1.
func findTurn(segs []segment, key matchKey) int {
	for i, s := range segs {
		if key.matches(s.cms.Payload) {
			return i
		}
	}
	return -1
}

// progress counts finished calls and wakes whoever waits on a count.
type progress struct {
	mu      sync.Mutex
	n       int
	changed chan struct{}
}

func newProgress() *progress { return &progress{changed: make(chan struct{})} }

func (p *progress) inc() {
	p.mu.Lock()
	p.n++
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// waitFor blocks until at least n calls finished; false if stop or ctx
// ended first.
func (p *progress) waitFor(ctx context.Context, n int, stop <-chan struct{}) bool {
	for {
		p.mu.Lock()
		cur, ch := p.n, p.changed
		p.mu.Unlock()
		if cur >= n {
			return true
		}
		select {
		case <-ch:
		case <-stop:
			return false
		case <-ctx.Done():
			return false
		}
	}
}
