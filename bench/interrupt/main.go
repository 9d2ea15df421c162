// Command interrupt measures what issue 25 asks of an interrupt: from a
// driver's session.interrupt request to (a) the provider stream closed, as
// the fake provider sees it, and (b) the turn's last event stored, which is
// when session.interrupt answers (the Interrupt update returns once the
// turn's server.message.interrupted is stored); and (c) to the interrupted
// turn's own sendMessage stream ending.
//
// A fake provider streams an answer that never ends, a word every 10 ms.
// Each measured round sends a turn with the deltas opt-in, waits for its
// first text deltas (the provider call is running), then interrupts it.
// -concurrency sessions do so side by side. Before each interrupt the
// round also times -rejects sendMessage calls with Bae-When-Busy: reject
// (refused, the call running), each followed by a GET /healthz (the
// machine's floor in the same run), and -queries rounds time the workflow's
// turn-gate query the reject policy used to wait on. The same run then measures
// -baseline rounds with the interrupt's fast path off (api.Deps
// SlowInterrupt: the interrupt reaches the call only with the workflow
// task's heartbeat), for a same-run ratio.
//
//	go run ./bench/interrupt
//	go run ./bench/interrupt -interrupts 100 -concurrency 1 -baseline 0
//	go run ./bench/interrupt -rejects 5 -baseline 0            # the reject figure
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/sdk"
)

const tokenGap = 10 * time.Millisecond

// endless is far more than any round waits for: 200,000 words.
var endless = strings.Repeat("word ", 200000)

type options struct {
	interrupts, baseline, concurrency, deltas int
	rejects, queries                          int
	db                                        string
	verbose                                   bool
	// pgRoundTrip times one SELECT 1 on the server's own pool.
	pgRoundTrip func(context.Context) (time.Duration, error)
}

func main() {
	var o options
	flag.IntVar(&o.interrupts, "interrupts", 50, "measured interrupts with the fast path")
	flag.IntVar(&o.baseline, "baseline", 10, "measured interrupts with the fast path off (each waits for a workflow task heartbeat, seconds)")
	flag.IntVar(&o.concurrency, "concurrency", 5, "sessions interrupting side by side")
	flag.IntVar(&o.deltas, "deltas", 3, "text deltas the client sees before it interrupts")
	flag.IntVar(&o.rejects, "rejects", 1, "Bae-When-Busy: reject sends timed per round, while the provider call runs")
	flag.IntVar(&o.queries, "queries", 5, "rounds that also time the workflow's turn-gate query (the reject policy's former path, about 1 s each)")
	flag.StringVar(&o.db, "db", benchstack.DefaultDatabaseURL(), "maintenance database URL")
	flag.BoolVar(&o.verbose, "v", false, "show baesrv/Temporal warnings")
	flag.Parse()
	benchstack.Main("interrupt", func(ctx context.Context, log *slog.Logger) error { return run(ctx, log, o) })
}

// fake streams the endless answer and notes, per turn (its user text),
// when the stream ended and whether its client had closed it.
type fake struct {
	inner *fakeprovider.Server
	mu    sync.Mutex
	token map[int]string // request seq -> user text
	ends  map[string]fakeprovider.StreamEnd
	ended map[string]chan struct{}
}

func newFake() *fake {
	f := &fake{inner: fakeprovider.NewHandler(), token: map[int]string{}, ends: map[string]fakeprovider.StreamEnd{}, ended: map[string]chan struct{}{}}
	f.inner.OnRequest(func(rec fakeprovider.Recorded) {
		f.mu.Lock()
		f.token[rec.Seq] = rec.LastUserText()
		f.mu.Unlock()
	})
	f.inner.Respond(func(fakeprovider.Recorded) fakeprovider.Reply {
		return fakeprovider.Text(endless).Streamed(0, tokenGap)
	})
	go func() {
		for end := range f.inner.StreamEnds() {
			f.mu.Lock()
			tok := f.token[end.Seq]
			delete(f.token, end.Seq)
			f.ends[tok] = end
			ch := f.ended[tok]
			f.mu.Unlock()
			if ch != nil {
				close(ch)
			}
		}
	}()
	return f
}

// expect registers a turn's user text before it is sent.
func (f *fake) expect(tok string) <-chan struct{} {
	ch := make(chan struct{})
	f.mu.Lock()
	f.ended[tok] = ch
	f.mu.Unlock()
	return ch
}

func (f *fake) end(tok string) fakeprovider.StreamEnd {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.ended, tok)
	e := f.ends[tok]
	delete(f.ends, tok)
	return e
}

func run(ctx context.Context, log *slog.Logger, o options) error {
	f := newFake()
	served, err := benchstack.ServeTimed(f.inner, nil)
	if err != nil {
		return err
	}
	defer served.Close()
	var srvLog *slog.Logger
	if o.verbose {
		srvLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	st, err := benchstack.StartInProc(ctx, log, benchstack.InProcOptions{
		BaseDatabaseURL: o.db, ServerLog: srvLog,
		ConfigTOML: fmt.Sprintf("\n[[providers.entries]]\nname = \"fake\"\nprovider = \"anthropic\"\nbase_url = \"%s\"\nmodel = \"fake-model\"\nauth_token = \"not-a-secret\"\n", served.URL),
	})
	if err != nil {
		return err
	}
	defer st.Close()
	key, err := st.Admin.Setup(ctx, map[string]any{"name": "interrupt", "primary_provider": "fake", "allowed_tools": []string{}})
	if err != nil {
		return err
	}
	hc := benchstack.HTTPClient(2 * o.concurrency)
	sessions := make([]*sdk.Session, o.concurrency)
	for i := range sessions {
		if sessions[i], err = sdk.Connect(ctx, sdk.Config{ServerURL: st.ClientURL, ClientKey: key, HTTPClient: hc, ClientVersion: "bae-bench", Logger: slog.New(slog.DiscardHandler)}); err != nil {
			return err
		}
	}
	// Warm-up: every session's workflow runs and has interrupted once.
	if _, err := phase(ctx, log, hc, st.ClientURL, f, sessions, len(sessions), o, nil, "warm"); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	o.pgRoundTrip = func(ctx context.Context) (time.Duration, error) {
		t0 := time.Now()
		var one int
		if err := st.Parts.Store.Pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			return 0, fmt.Errorf("select 1: %w", err)
		}
		return time.Since(t0), nil
	}
	log.Info("fast path", "interrupts", o.interrupts, "concurrency", o.concurrency)
	var queries atomic.Int32
	queries.Store(int32(o.queries))
	query := func(ctx context.Context, sid string) (time.Duration, bool) {
		if queries.Add(-1) < 0 {
			return 0, false
		}
		t0 := time.Now()
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, _ = st.Parts.Deps.Engine.Control(qctx, sid)
		return time.Since(t0), true
	}
	fast, err := phase(ctx, log, hc, st.ClientURL, f, sessions, o.interrupts, o, query, "fast")
	if err != nil {
		return fmt.Errorf("fast path: %w", err)
	}
	var slow *figures
	if o.baseline > 0 {
		st.Parts.Deps.SlowInterrupt.Store(true)
		log.Info("baseline, fast path off", "interrupts", o.baseline, "concurrency", o.concurrency)
		if slow, err = phase(ctx, log, hc, st.ClientURL, f, sessions, o.baseline, o, nil, "slow"); err != nil {
			return fmt.Errorf("baseline: %w", err)
		}
	}
	report(os.Stdout, o, fast, slow)
	return nil
}

// figures are one phase's latencies from the interrupt request.
type figures struct {
	closed, answered, ended []time.Duration
	rejected, queried       []time.Duration // Bae-When-Busy: reject answers; workflow turn-gate queries
	floor, pg               []time.Duration // GET /healthz, then SELECT 1, right after each reject
	notClosed               int             // streams that ran to their end (never, with the endless answer)
}

// queryFunc times the workflow's turn-gate query on a session, when the
// phase still has queries to time.
type queryFunc func(ctx context.Context, sid string) (time.Duration, bool)

// phase runs n interrupt rounds over the sessions, side by side.
func phase(ctx context.Context, log *slog.Logger, hc *http.Client, base string, f *fake, sessions []*sdk.Session, n int, o options, query queryFunc, name string) (*figures, error) {
	fig := &figures{}
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		first error
	)
	rounds := make(chan int, n)
	for i := range n {
		rounds <- i
	}
	close(rounds)
	for _, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				r, err := round(ctx, hc, base, f, s, fmt.Sprintf("%s %d %s", name, i, s.ID), o, query)
				mu.Lock()
				if err != nil {
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
				fig.closed = append(fig.closed, r.closed)
				fig.answered = append(fig.answered, r.answered)
				fig.ended = append(fig.ended, r.ended)
				fig.rejected = append(fig.rejected, r.rejected...)
				fig.floor = append(fig.floor, r.floor...)
				fig.pg = append(fig.pg, r.pg...)
				if r.queried > 0 {
					fig.queried = append(fig.queried, r.queried)
				}
				if !r.clientGone {
					fig.notClosed++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return fig, first
}

type roundResult struct {
	closed, answered, ended time.Duration
	rejected, floor, pg     []time.Duration
	queried                 time.Duration
	clientGone              bool
}

var (
	deltaPrefix = []byte(`{"jsonrpc":"2.0","method":"session.delta"`)
	textDelta   = []byte(`"type":"text_delta"`)
)

// round sends a turn, waits for its first text deltas, interrupts it and
// times what follows.
func round(ctx context.Context, hc *http.Client, base string, f *fake, s *sdk.Session, tok string, o options, query queryFunc) (roundResult, error) {
	var r roundResult
	deltas := o.deltas
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	ended := f.expect(tok)
	resp, err := benchstack.PostRPC(ctx, hc, base, s.ID, s.Key(), 1, "session.sendMessage", benchstack.UserMessage(tok), http.Header{"Bae-Deltas": {"on"}})
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for seen := 0; seen < deltas; {
		line, err := br.ReadBytes('\n')
		if bytes.HasPrefix(line, deltaPrefix) && bytes.Contains(line, textDelta) {
			seen++
			continue
		}
		if err != nil {
			return r, fmt.Errorf("turn stream ended before %d deltas: %w", deltas, err)
		}
		if len(bytes.TrimSpace(line)) > 0 && !bytes.HasPrefix(line, []byte(`{"jsonrpc":"2.0","method"`)) {
			return r, fmt.Errorf("turn ended before it was interrupted: %.300s", line)
		}
	}
	// The provider call runs: a reject is refused, from the database.
	for j := range o.rejects {
		d, err := reject(ctx, hc, base, s, fmt.Sprintf("%s reject %d", tok, j))
		if err != nil {
			return r, err
		}
		r.rejected = append(r.rejected, d)
		// The same server's cheapest answer, at once: what the machine
		// and the HTTP stack add to the reject, apart from its own path.
		if d, err = healthz(ctx, hc, base); err != nil {
			return r, err
		}
		r.floor = append(r.floor, d)
		// One database round trip: the reject makes three (its
		// authentication, the budgets, the turn gate).
		if o.pgRoundTrip != nil {
			if d, err = o.pgRoundTrip(ctx); err != nil {
				return r, err
			}
			r.pg = append(r.pg, d)
		}
	}
	if query != nil {
		if d, ok := query(ctx, s.ID); ok {
			r.queried = d
		}
	}
	t0 := time.Now()
	res, err := benchstack.PostRPCResult(ctx, hc, base, s.ID, s.Key(), "session.interrupt", map[string]any{})
	if err != nil {
		return r, err
	}
	r.answered = time.Since(t0)
	var out struct {
		Interrupted bool `json:"interrupted"`
	}
	if err := json.Unmarshal(res, &out); err != nil || !out.Interrupted {
		return r, fmt.Errorf("session.interrupt did not interrupt: %s", res)
	}
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 && !bytes.HasPrefix(line, []byte(`{"jsonrpc":"2.0","method"`)) {
			r.ended = time.Since(t0)
			break
		}
		if err != nil {
			return r, fmt.Errorf("turn stream ended without its terminal response: %w", err)
		}
	}
	select {
	case <-ended:
	case <-ctx.Done():
		return r, fmt.Errorf("the fake's stream never ended: %w", ctx.Err())
	}
	end := f.end(tok)
	r.closed, r.clientGone = end.At.Sub(t0), end.ClientGone
	return r, nil
}

// reject times a sendMessage with Bae-When-Busy: reject to its refusal.
func reject(ctx context.Context, hc *http.Client, base string, s *sdk.Session, text string) (time.Duration, error) {
	t0 := time.Now()
	resp, err := benchstack.PostRPC(ctx, hc, base, s.ID, s.Key(), 2, "session.sendMessage", benchstack.UserMessage(text), http.Header{"Bae-When-Busy": {"reject"}})
	if err != nil {
		return 0, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("read the reject answer: %w", err)
	}
	if !bytes.Contains(body, []byte("session_busy")) {
		return 0, fmt.Errorf("a reject while the call runs was not refused: %.300s", body)
	}
	return d, nil
}

// healthz times GET /healthz, which answers without any work of its own.
func healthz(ctx context.Context, hc *http.Client, base string) (time.Duration, error) {
	t0 := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("healthz: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return time.Since(t0), nil
}

func report(w io.Writer, o options, fast, slow *figures) {
	fmt.Fprintf(w, "\ninterrupt: fake streams an endless answer, a word every %s; %d sessions side by side; interrupted after %d text deltas\n\n", tokenGap, o.concurrency, o.deltas)
	line := func(name string, ds []time.Duration) benchstack.Dist {
		d := benchstack.Summarise(ds)
		fmt.Fprintf(w, "  %-52s p50 %7.1f ms  p99 %7.1f ms  max %7.1f ms\n", name, d.P50, d.P99, d.Max)
		return d
	}
	fmt.Fprintf(w, "fast path (%d interrupts):\n", len(fast.closed))
	fc := line("request → provider stream closed (fake sees it)", fast.closed)
	fa := line("request → last event stored (session.interrupt answers)", fast.answered)
	line("request → the turn's sendMessage stream ends", fast.ended)
	if len(fast.rejected) > 0 {
		fmt.Fprintf(w, "\nwhile the provider call runs (%d rejects, %d workflow queries):\n", len(fast.rejected), len(fast.queried))
		line("Bae-When-Busy: reject → session_busy answer", fast.rejected)
		line("GET /healthz right after each (the machine's floor)", fast.floor)
		if len(fast.pg) > 0 {
			line("then SELECT 1 on the server's pool (1 round trip)", fast.pg)
		}
	}
	if len(fast.queried) > 0 {
		line("workflow turn-gate query (the former reject path)", fast.queried)
	}
	if fast.notClosed > 0 {
		fmt.Fprintf(w, "  %d streams were not closed by their client\n", fast.notClosed)
	}
	if slow == nil {
		return
	}
	fmt.Fprintf(w, "\nfast path off, same run (%d interrupts):\n", len(slow.closed))
	sc := line("request → provider stream closed (fake sees it)", slow.closed)
	sa := line("request → last event stored (session.interrupt answers)", slow.answered)
	line("request → the turn's sendMessage stream ends", slow.ended)
	fmt.Fprintf(w, "\nfast ÷ off: stream closed p50 %.3f×, last event stored p50 %.3f×\n", fc.P50/sc.P50, fa.P50/sa.P50)
}
