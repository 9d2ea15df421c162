package chaoslib

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/sdk"
)

// Call outcomes, as the client saw them.
const (
	outAnswered    = "answered"    // a terminal result with the assistant's message
	outInterrupted = "interrupted" // the turn was interrupted; the result is the kept text
	outRefused     = "refused"     // refused before anything was stored (session_busy, quota)
	outFailed      = "failed"      // the turn ran and failed (a terminal error)
	outLost        = "lost"        // the client never learned the outcome
)

// Call kinds: what a driver did.
const (
	kindPlain    = "plain" // a streamed turn with deltas
	kindSlow     = "slow"  // a slowly streamed turn that a sibling driver interrupts
	kindTool     = "tool"  // a turn the fake answers with a client tool_use
	kindContinue = "tool-result"
	kindMCPHTTP  = "mcp-http"
	kindMCPStdio = "mcp-stdio"
	kindSandbox  = "sandbox"
	kindReject   = "busy-reject"    // sent with Bae-When-Busy: reject
	kindBusyInt  = "busy-interrupt" // sent with Bae-When-Busy: interrupt
)

// recoverWithin bounds how long a client keeps resending one message
// under its key before it counts it lost: longer than any outage. It
// gives up only after recoverCalm without a replica, Temporal or
// PostgreSQL fault too: back-to-back outages (three one-minute ones in
// seven minutes, seed 16004692695040544089) leave no server able to
// answer within recoverWithin.
const (
	recoverWithin = 4 * time.Minute
	recoverCalm   = 2 * time.Minute
)

// call is one message as its client saw it, over all its sends.
type call struct {
	Session, Driver, Seq int
	Kind                 string
	Text                 string // unique; "" for a continuation
	ToolUseID            string // a continuation's tool_use
	Tag                  string // the MCP id / sandbox counter of the turn
	IdemKey              string
	Start, End           time.Time
	Outcome              string
	Err                  string
	Reply                json.RawMessage // the terminal message
	Sends                int             // HTTP attempts, the SDK's and ours
	Deltas               []sdk.Delta     // the deltas of the last send
	DeltaSends           int             // sends that carried deltas
}

// chaosSession is one session of the campaign and its clients.
type chaosSession struct {
	n         int
	id        string
	drivers   []*driver
	observers []*observer
	sandbox   string // the remote sandbox container, "" for none
	budget    bool
}

// driver sends turns on a session, one at a time, as one client.
type driver struct {
	n     int
	s     *chaosSession
	sess  *sdk.Session
	run   *run
	r     *rand.Rand
	mu    sync.Mutex
	calls []*call
	cur   *call // the call whose deltas arrive now
	seq   int
}

func (d *driver) onDelta(_ context.Context, x sdk.Delta) error {
	d.mu.Lock()
	if d.cur != nil {
		d.cur.Deltas = append(d.cur.Deltas, x)
	}
	d.mu.Unlock()
	return nil
}

func (d *driver) snapshot() []*call {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*call(nil), d.calls...)
}

// loop drives turns until ctx's deadline (stop), then returns once its
// last call has an outcome.
func (d *driver) loop(stop <-chan struct{}) {
	ctx := context.Background()
	for {
		select {
		case <-stop:
			// A last plain message: it abandons any pause this session
			// still has, so every workflow can be idle at the end.
			for try := range 3 {
				d.seq++
				c := d.send(ctx, kindPlain, fmt.Sprintf("chaos %s s%02d d%d final %d", d.run.id, d.s.n, d.n, try), "", "")
				if c.Outcome != outRefused {
					break
				}
			}
			return
		default:
		}
		d.step(ctx)
		d.run.turns.Add(1)
		// A short think time; the machine is shared.
		time.Sleep(time.Duration(200+d.r.IntN(800)) * time.Millisecond)
	}
}

// step picks one action of the mix.
func (d *driver) step(ctx context.Context) {
	d.seq++
	base := fmt.Sprintf("chaos %s s%02d d%d n%04d", d.run.id, d.s.n, d.n, d.seq)
	tag := fmt.Sprintf("s%02dd%dn%04d", d.s.n, d.n, d.seq)
	x := d.r.Float64()
	switch {
	case x < 0.30:
		d.send(ctx, kindPlain, base, "", "")
	case x < 0.40:
		d.slow(ctx, base+" "+markSlow)
	case x < 0.52:
		c := d.send(ctx, kindTool, base+" "+markTool, "", "")
		if id := clientToolUseID(c.Reply); id != "" && c.Outcome == outAnswered && d.r.IntN(5) > 0 {
			// Four in five tool calls are answered; the rest are abandoned
			// by the session's next message.
			d.sendContent(ctx, kindContinue, []sdk.Block{sdk.ToolResult{ToolUseID: id, Content: []sdk.Block{sdk.Text{Text: "probe ok " + id}}}}, "", id, tag, "")
		}
	case x < 0.62:
		d.send(ctx, kindMCPHTTP, base+" [mcp-http:"+tag+"]", tag, "")
	case x < 0.72:
		d.send(ctx, kindMCPStdio, base+" [mcp-stdio:"+tag+"]", tag, "")
	case x < 0.82 && d.s.sandbox != "":
		d.send(ctx, kindSandbox, base+" [sh:"+tag+"]", tag, "")
	case x < 0.91:
		d.send(ctx, kindReject, base, "", sdk.BusyReject)
	default:
		d.send(ctx, kindBusyInt, base, "", sdk.BusyInterrupt)
	}
}

// slow sends a slowly streamed turn and has a sibling driver (or itself,
// alone) interrupt it a moment later.
func (d *driver) slow(ctx context.Context, text string) {
	other := d.s.drivers[(d.n+1)%len(d.s.drivers)]
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.send(ctx, kindSlow, text, "", "")
	}()
	t := time.NewTimer(time.Duration(500+d.r.IntN(2500)) * time.Millisecond)
	select {
	case <-done:
		t.Stop()
		return
	case <-t.C:
	}
	// The turn to stop, as a UI names it: the one the deltas are about.
	// With InterruptAny the interrupt names none and stops whatever turn
	// runs, or else the paused one.
	turnID := ""
	if !d.run.o.InterruptAny {
		d.mu.Lock()
		if d.cur != nil && len(d.cur.Deltas) > 0 {
			turnID = d.cur.Deltas[0].TurnID
		}
		d.mu.Unlock()
		if turnID == "" {
			<-done // no delta yet: nothing to name
			return
		}
	}
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err := other.sess.Interrupt(ictx, turnID)
	cancel()
	if err == nil {
		d.run.interrupts.Add(1)
	}
	<-done
}

func (d *driver) send(ctx context.Context, kind, text, tag string, busy sdk.WhenBusy) *call {
	return d.sendContent(ctx, kind, text, text, "", tag, busy)
}

// sendContent sends one message until its outcome is known: every send
// carries the message's Idempotency-Key, so a resend after a failure whose
// outcome the client cannot know relays the turn already stored.
func (d *driver) sendContent(ctx context.Context, kind string, content any, text, toolUseID, tag string, busy sdk.WhenBusy) *call {
	c := &call{Session: d.s.n, Driver: d.n, Seq: d.seq, Kind: kind, Text: text, ToolUseID: toolUseID, Tag: tag, Start: time.Now(),
		IdemKey: fmt.Sprintf("%s-s%02d-d%d-n%04d-%s", d.run.id, d.s.n, d.n, d.seq, kind)}
	d.mu.Lock()
	d.calls = append(d.calls, c)
	d.mu.Unlock()
	defer func() { c.End = time.Now() }()
	deadline := time.Now().Add(recoverWithin)
	for {
		d.mu.Lock()
		c.Deltas, d.cur = nil, c
		d.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		res, err := d.sess.SendOnce(cctx, content, sdk.SendOptions{IdempotencyKey: c.IdemKey, WhenBusy: busy})
		cancel()
		d.mu.Lock()
		d.cur = nil
		d.mu.Unlock()
		if res != nil {
			c.Sends += res.Attempts
			c.DeltaSends = res.Attempts
		} else {
			c.Sends++
			c.DeltaSends = 2 // unknown: the deltas are not checked
		}
		if err == nil {
			c.Reply = replyOf(res)
			c.Outcome = outAnswered
			if res.Interrupted {
				c.Outcome = outInterrupted
			}
			return c
		}
		c.Err = err.Error()
		var re *sdk.RPCError
		var pf *sdk.ProvidersFailedError
		switch {
		case errors.As(err, &pf):
			c.Outcome = outFailed
			return c
		case errors.As(err, &re) && strings.HasPrefix(re.Message, "session_busy"):
			c.Outcome = outRefused
			d.run.refusedBusy.Add(1)
			return c
		case errors.As(err, &re) && strings.HasPrefix(re.Message, "quota_exceeded") && strings.Contains(re.Message, "already stored"):
			// A resend of a stored message refused at a stream cap: its
			// turn runs; sent again until its outcome is known.
		case errors.As(err, &re) && strings.HasPrefix(re.Message, "quota_exceeded"):
			c.Outcome = outRefused
			d.run.refusedQuota.Add(1)
			d.run.resetBudget(ctx, d.s)
			return c
		case errors.As(err, &re) && strings.Contains(re.Message, "no turn is paused"):
			// A late tool_result: the pause expired and was abandoned by
			// another driver's message, or was interrupted. Final.
			c.Outcome = outRefused
			return c
		case errors.As(err, &re) && strings.Contains(re.Message, "not open"):
			// The session ended (closed, or in the error state): final.
			c.Outcome = outRefused
			return c
		case errors.As(err, &re) && strings.HasPrefix(re.Message, "Internal error: the turn failed"):
			c.Outcome = outFailed
			return c
		}
		if time.Now().After(deadline) && d.run.calmFor() >= recoverCalm {
			c.Outcome = outLost
			return c
		}
		time.Sleep(time.Second)
	}
}

// replyOf is the turn's reply as logged, else the result's message.
func replyOf(res *sdk.TurnResult) json.RawMessage {
	for i := len(res.Events) - 1; i >= 0; i-- {
		if res.Events[i].Type == sdk.EventServerMessageSend || res.Events[i].Type == "server.message.interrupted" {
			return res.Events[i].Payload
		}
	}
	b, _ := json.Marshal(res.Message)
	return b
}

// clientToolUseID is the id of the client tool_use a paused reply carries.
func clientToolUseID(msg json.RawMessage) string {
	for _, b := range benchstack.Blocks(benchstack.ContentOf(msg)) {
		if b["type"] == "tool_use" && b["name"] == clientTool {
			id, _ := b["id"].(string)
			return id
		}
	}
	return ""
}
