package crashlib

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/bae-go/bae-go/internal/fakeprovider"
)

const (
	probeTool  = "crash_probe"
	toolMarker = "[probe]"
	// abandonedText is what the server writes for a client call that was
	// never answered (activities.abandonedText).
	abandonedText = "Client tool call was abandoned before returning a result."
	// recoverPoll is the GET /events poll interval of a client recovering a
	// turn whose stream broke.
	recoverPoll = 200 * time.Millisecond
	// callTimeout is how long a client waits on one open stream before it
	// gives up on it and recovers from the log instead.
	callTimeout = 3 * time.Minute
	// maxSends bounds resends of a request that got no HTTP response.
	maxSends = 50
)

// callKind is what a sendMessage call carries.
type callKind string

const (
	kindPlain    callKind = "plain"       // a text message; expects "echo: <text>"
	kindTool     callKind = "tool"        // a text message the fake answers with a client tool_use
	kindContinue callKind = "tool-result" // the tool_result continuation of a paused turn
	kindFinal    callKind = "final"       // each session's last plain message
)

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

// call is one session.sendMessage as the client saw it.
type call struct {
	Session    int
	Turn       int
	Kind       callKind
	Abandon    bool // a tool turn the client leaves unanswered on purpose
	Key        matchKey
	ExpectText string // the echo the reply must carry; "" for kindTool
	Start, End time.Time
	Sends      int // HTTP requests made (resends only after no response at all)
	Broken     bool
	ErrTerm    *rpcError
	Recovered  bool
	// RecoverTook is from the broken stream to the reply found in the log.
	RecoverTook time.Duration
	Lost        string // why no reply was found in the log
	Wrong       string // the reply did not match what was sent
	Terminal    json.RawMessage
	Reply       json.RawMessage
	HTTPStatus  int
}

// turnPlan is one user turn: plain, or a client tool round trip whose
// continuation the client may deliberately never send.
type turnPlan struct {
	tool, abandon bool
}

// driver drives one session's turns in order, as a single client would.
type driver struct {
	n      int
	api    *api
	st     *stack
	sess   *session
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

// ambiguous reports a JSON-RPC error that does not say whether the turn
// ran: the update call failed, not the turn.
func ambiguous(e *rpcError) bool {
	return e.Code == -32000 && e.Message == "session loop failed"
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
		if !p.tool {
			d.send(ctx, j, kindPlain, text, matchKey{Text: text}, "echo: "+text)
			continue
		}
		text += " " + toolMarker
		c := d.send(ctx, j, kindTool, text, matchKey{Text: text}, "")
		c.Abandon = p.abandon
		id := clientToolUseID(c.Reply)
		if id == "" || p.abandon {
			// No pause to answer (the reply is lost or wrong), or a client
			// that never answers: the next message abandons the pause.
			continue
		}
		result := []map[string]any{{"type": "tool_result", "tool_use_id": id, "content": "probe " + id + " ok"}}
		d.send(ctx, j, kindContinue, result, matchKey{ToolUseID: id}, "echo: "+text)
	}
	if d.stopped || ctx.Err() != nil {
		return
	}
	text := fmt.Sprintf("crash %s s%d final", d.runID, d.n)
	d.send(ctx, len(d.plan), kindFinal, text, matchKey{Text: text}, "echo: "+text)
}

// send makes one sendMessage call and, if its stream broke, recovers the
// turn's reply from the event log without ever resending the message.
func (d *driver) send(ctx context.Context, turn int, kind callKind, content any, key matchKey, expect string) *call {
	c := &call{Session: d.n, Turn: turn, Kind: kind, Key: key, ExpectText: expect, Start: time.Now()}
	defer func() {
		c.End = time.Now()
		d.record(c)
	}()
	params := map[string]any{"message": map[string]any{"role": "user", "content": content}}
	var out rpcOutcome
	for {
		c.Sends++
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		out = d.api.rpc(cctx, d.sess, "session.sendMessage", params)
		gaveUp := cctx.Err() != nil
		cancel()
		// No HTTP response at all means the server never flushed its 200,
		// which it does before storing the message: nothing was stored and
		// resending is not a second turn. Anything later is not resent.
		if !out.NoResponse || gaveUp || c.Sends >= maxSends {
			break
		}
		if err := d.st.awaitHealthy(ctx); err != nil {
			c.Lost = "server never came back: " + err.Error()
			return c
		}
	}
	switch {
	case out.HTTPStatus != 0:
		c.HTTPStatus = out.HTTPStatus
		c.Lost = out.Err.Error()
		return c
	case out.NoResponse:
		c.Lost = "no response after resends: " + out.Err.Error()
		return c
	case out.Result != nil:
		var res struct {
			Message json.RawMessage `json:"message"`
		}
		if err := json.Unmarshal(out.Result, &res); err != nil {
			c.Wrong = "undecodable terminal result: " + err.Error()
			return c
		}
		c.Terminal, c.Reply = res.Message, res.Message
	case out.RPCErr != nil && !ambiguous(out.RPCErr):
		// A definite rejection (session ended, bad merge, ...): nothing
		// will appear in the log, and later turns would be meaningless.
		c.ErrTerm = out.RPCErr
		c.Lost = fmt.Sprintf("rejected with %d %q", out.RPCErr.Code, out.RPCErr.Message)
		d.stopped = true
		return c
	case out.RPCErr != nil:
		// The server could not tell how the turn went; the log can.
		c.ErrTerm = out.RPCErr
		t := time.Now()
		c.Reply, c.Lost = d.recover(ctx, key)
		c.RecoverTook = time.Since(t)
	default:
		c.Broken = true
		t := time.Now()
		c.Reply, c.Lost = d.recover(ctx, key)
		c.RecoverTook = time.Since(t)
	}
	if c.Reply == nil {
		return c
	}
	c.Recovered = c.Terminal == nil
	if kind == kindTool {
		if clientToolUseID(c.Reply) == "" {
			c.Wrong = "expected a client tool_use, got " + string(c.Reply)
		}
	} else if got := messageText(c.Reply); got != expect {
		c.Wrong = fmt.Sprintf("expected %q, got %q", expect, got)
	}
	return c
}

// recover polls GET /events (through further kills) until the turn of key
// shows its server.message.send, or the bound passes.
func (d *driver) recover(ctx context.Context, key matchKey) (json.RawMessage, string) {
	deadline := time.Now().Add(d.within)
	tick := time.NewTicker(recoverPoll)
	defer tick.Stop()
	var lastErr error
	for {
		evs, err := d.api.events(ctx, d.sess)
		lastErr = err
		if err == nil {
			segs := segments(evs)
			if i := findTurn(segs, key); i >= 0 {
				if sms := segs[i].replies(); len(sms) > 0 {
					return sms[0].Payload, ""
				}
			}
		}
		if time.Now().After(deadline) {
			if lastErr != nil {
				return nil, fmt.Sprintf("no reply in the log within %s (last read error: %v)", d.within, lastErr)
			}
			return nil, fmt.Sprintf("no reply in the log within %s", d.within)
		}
		select {
		case <-ctx.Done():
			return nil, "run cancelled: " + ctx.Err().Error()
		case <-tick.C:
		}
	}
}

// respond is the fake provider: a small random delay, so kills land before,
// during and after provider calls, and a client tool_use for messages
// carrying the marker.
func respond(maxDelay time.Duration) func(fakeprovider.Recorded) fakeprovider.Reply {
	return func(rec fakeprovider.Recorded) fakeprovider.Reply {
		var delay time.Duration
		if maxDelay > 0 {
			delay = rand.N(maxDelay + 1)
		}
		msgs := rec.Messages()
		if len(msgs) > 0 {
			last := msgs[len(msgs)-1]
			if last["role"] == "user" && strings.Contains(anyText(last["content"]), toolMarker) {
				return fakeprovider.ToolUse("", probeTool, map[string]any{"n": anyText(last["content"])}).After(delay)
			}
		}
		return fakeprovider.Echo().After(delay)
	}
}

// anyText is the text of string content or of an array's text blocks.
func anyText(content any) string {
	switch c := content.(type) {
	case string:
		return c
	case []any:
		var parts []string
		for _, b := range c {
			if m, ok := b.(map[string]any); ok && m["type"] == "text" {
				if t, ok := m["text"].(string); ok {
					parts = append(parts, t)
				}
			}
		}
		return strings.Join(parts, "\n")
	}
	return ""
}

type block = map[string]any

// blocks decodes a message's content: a string is one text block.
func blocks(content json.RawMessage) []block {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return []block{{"type": "text", "text": s}}
	}
	var arr []block
	_ = json.Unmarshal(content, &arr)
	return arr
}

func contentOf(msg json.RawMessage) json.RawMessage {
	var m struct {
		Content json.RawMessage `json:"content"`
	}
	_ = json.Unmarshal(msg, &m)
	return m.Content
}

// messageText joins the text blocks of an assistant message.
func messageText(msg json.RawMessage) string {
	var parts []string
	for _, b := range blocks(contentOf(msg)) {
		if b["type"] == "text" {
			if t, ok := b["text"].(string); ok {
				parts = append(parts, t)
			}
		}
	}
	return strings.Join(parts, "\n")
}

// clientToolUseID is the id of the probe tool_use a paused reply asks the
// client to run, or "".
func clientToolUseID(msg json.RawMessage) string {
	for _, b := range blocks(contentOf(msg)) {
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
	for _, b := range blocks(contentOf(payload)) {
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
