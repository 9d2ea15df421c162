// Command live measures what issue 25 asks of live turns. A fake provider
// streams 200 tokens 10 ms apart; drivers of -sessions sessions send turns
// paced at -rate turns/s with the deltas opt-in, and the bench prints:
//
//   - what the server adds to the first delta: from the fake's first byte
//     on the wire (its first flush) to the client reading its first
//     session.delta line, one clock (issue 25's target); beside it, the
//     turn's start (request sent → the fake got the provider request) and
//     the time to first delta minus the fake's time to first byte, each
//     from its own request's start, which is the two together;
//
//   - the gap the server adds between consecutive deltas: client gap minus
//     the fake's gap between writing the same two tokens;
//
//   - server-added latency of the whole turn and process CPU per turn,
//     beside the same load on a provider entry with stream = false (the
//     fake then holds its whole answer for the same 2 s);
//
//   - process CPU of streaming turns on one session watched by 1 and by
//     100 session.subscribe observers (opted in), and their ratio. The
//     observers run in a child process, so their reading is not counted
//     as the server's.
//
//     go run ./bench/live
//     go run ./bench/live -sessions 100 -rate 40 -turns 6
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/sdk"
)

const (
	tokens = 200
	// reqHeader joins a provider request to the turn it answers.
	reqHeader = "X-Bench-Request"
)

type options struct {
	sessions, turns   int
	rate              float64
	observers, obsRun int
	tokenGap          time.Duration
	db                string
	verbose           bool
	child             string
	cpuprofile        string
	fanout            bool
}

func main() {
	var o options
	flag.IntVar(&o.sessions, "sessions", 50, "concurrent sessions, one driver each")
	flag.IntVar(&o.turns, "turns", 8, "measured turns per session, per phase")
	flag.Float64Var(&o.rate, "rate", 40, "offered turns/s across all sessions")
	flag.IntVar(&o.observers, "observers", 100, "observers on one session in the fan-out phase")
	flag.IntVar(&o.obsRun, "observer-turns", 8, "turns measured with 1 and with -observers observers")
	flag.StringVar(&o.db, "db", benchstack.DefaultDatabaseURL(), "maintenance database URL")
	flag.BoolVar(&o.verbose, "v", false, "show baesrv/Temporal warnings")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the streaming load phase to this file, and of each observer phase to this file.<profile>-<observers>")
	flag.BoolVar(&o.fanout, "fanout", true, "run the observer phases")
	flag.DurationVar(&o.tokenGap, "token-gap", 10*time.Millisecond, "time between the fake's tokens (deltas closer than 2 ms share a stream's flush)")
	flag.StringVar(&o.child, "observe", "", "internal: run observers (url,session,key,n) and read until killed")
	flag.Parse()
	if o.child != "" {
		observeChild(o.child)
		return
	}
	benchstack.Main("live", func(ctx context.Context, log *slog.Logger) error { return run(ctx, log, o) })
}

// answer is the text the fake streams: 200 numbered tokens, one a piece.
var answer = func() string {
	var b strings.Builder
	for i := range tokens {
		fmt.Fprintf(&b, "tk%03d ", i)
	}
	return b.String()
}()

// fakeTurn is what the fake did for one turn: when its handler started,
// when it wrote each token (wall clock) and when it returned.
type fakeTurn struct {
	start, end time.Time
	firstByte  time.Time // the first flush of the response returned
	at         [tokens]time.Time
}

// fake streams the answer and stamps each token as it is written.
type fake struct {
	inner   *fakeprovider.Server
	seq     atomic.Int64
	tokens  sync.Map // request id -> turn token (the user message)
	perTurn sync.Map // turn token -> *fakeTurn
}

func newFake(tokenGap time.Duration) *fake {
	f := &fake{inner: fakeprovider.NewHandler()}
	f.inner.OnRequest(func(rec fakeprovider.Recorded) { f.tokens.Store(rec.Header.Get(reqHeader), rec.LastUserText()) })
	f.inner.Respond(func(rec fakeprovider.Recorded) fakeprovider.Reply {
		if rec.Stream() {
			return fakeprovider.Text(answer).Streamed(tokens, tokenGap)
		}
		// The whole answer after as long as the stream takes.
		return fakeprovider.Text(answer).After(tokens * tokenGap)
	})
	return f
}

type stampWriter struct {
	http.ResponseWriter
	ft *fakeTurn
}

func (w stampWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	now := time.Now()
	for rest := p; ; {
		i := bytes.Index(rest, []byte("tk"))
		if i < 0 || i+5 > len(rest) {
			break
		}
		if k, err := strconv.Atoi(string(rest[i+2 : i+5])); err == nil && k < tokens && w.ft.at[k].IsZero() {
			w.ft.at[k] = now
		}
		rest = rest[i+5:]
	}
	return n, err
}

func (w stampWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	if w.ft.firstByte.IsZero() {
		w.ft.firstByte = time.Now()
	}
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := strconv.FormatInt(f.seq.Add(1), 10)
	r.Header.Set(reqHeader, id)
	ft := &fakeTurn{start: time.Now()}
	f.inner.ServeHTTP(stampWriter{w, ft}, r)
	ft.end = time.Now()
	if tok, ok := f.tokens.LoadAndDelete(id); ok {
		f.perTurn.Store(tok.(string), ft)
	}
}

func (f *fake) take(token string) (*fakeTurn, bool) {
	v, ok := f.perTurn.LoadAndDelete(token)
	if !ok {
		return nil, false
	}
	return v.(*fakeTurn), true
}

// clientTurn is what a driver saw of one turn.
type clientTurn struct {
	start, end time.Time
	// firstDelta: the first session.delta line read (of any type);
	// first: the first token's.
	firstDelta, first time.Time
	at                [tokens]time.Time
	deltas            int
}

func run(ctx context.Context, log *slog.Logger, o options) error {
	f := newFake(o.tokenGap)
	served, err := benchstack.ServeTimed(f, nil)
	if err != nil {
		return err
	}
	defer served.Close()
	var srvLog *slog.Logger
	if o.verbose {
		srvLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	entry := func(name string, stream bool) string {
		return fmt.Sprintf("\n[[providers.entries]]\nname = %q\nprovider = \"anthropic\"\nbase_url = \"%s\"\nmodel = \"fake-model\"\nauth_token = \"not-a-secret\"\nstream = %t\n", name, served.URL, stream)
	}
	st, err := benchstack.StartInProc(ctx, log, benchstack.InProcOptions{
		BaseDatabaseURL: o.db, ServerLog: srvLog,
		ConfigTOML: entry("streaming", true) + entry("whole", false),
		Env:        map[string]string{"BAE_MAX_STREAMS_PER_SESSION": "0", "BAE_MAX_STREAMS_PER_KEY": "0"},
	})
	if err != nil {
		return err
	}
	defer st.Close()
	keys := map[string]string{}
	for _, p := range []string{"streaming", "whole"} {
		if keys[p], err = st.Admin.Setup(ctx, map[string]any{"name": p, "primary_provider": p, "allowed_tools": []string{}}); err != nil {
			return err
		}
	}
	hc := benchstack.HTTPClient(o.sessions)

	phases := map[string]*phase{}
	for _, p := range []string{"streaming", "whole"} {
		log.Info("phase", "profile", p, "sessions", o.sessions, "rate", o.rate, "turns_per_session", o.turns)
		stopProfile, err := startProfile(o.cpuprofile, p == "streaming")
		if err != nil {
			return err
		}
		ph, err := loadPhase(ctx, hc, st.ClientURL, keys[p], f, o)
		stopProfile()
		if err != nil {
			return fmt.Errorf("%s phase: %w", p, err)
		}
		phases[p] = ph
	}
	fan := map[string]map[int]fanout{}
	for _, p := range []string{"streaming", "whole"} {
		fan[p] = map[int]fanout{}
		if !o.fanout {
			continue
		}
		for _, n := range []int{1, o.observers} {
			log.Info("fan-out phase", "profile", p, "observers", n, "turns", o.obsRun)
			prof := ""
			if o.cpuprofile != "" {
				prof = fmt.Sprintf("%s.%s-%d", o.cpuprofile, p, n)
			}
			fo, err := fanoutPhase(ctx, hc, st.ClientURL, keys[p], f, n, o.obsRun, prof)
			if err != nil {
				return fmt.Errorf("fan-out %s %d: %w", p, n, err)
			}
			fan[p][n] = fo
		}
	}
	print(os.Stderr, o, phases, fan)
	return nil
}

// startProfile starts a CPU profile to file when on; the returned func
// stops it.
func startProfile(file string, on bool) (func(), error) {
	if file == "" || !on {
		return func() {}, nil
	}
	fh, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(fh); err != nil {
		fh.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); fh.Close() }, nil
}

// phase is the figures of one paced load phase.
type phase struct {
	turns, errors int
	wall          time.Duration
	cpu           time.Duration
	// firstAdded: fake's first byte → client's first delta (the target).
	// turnStart: request sent → the fake's handler started.
	// ttfdAdded: the two together, (client's time to first delta) −
	// (fake's time to first byte), each from its own request.
	// relay: the first token, fake wrote it → client read it.
	firstAdded, turnStart, ttfdAdded, relay, gapAdded []time.Duration
	turnAdded                                         []time.Duration
	deltasPerTurn                                     float64
}

func open(ctx context.Context, hc *http.Client, base, key string) (*sdk.Session, error) {
	return sdk.Connect(ctx, sdk.Config{ServerURL: base, ClientKey: key, HTTPClient: hc, ClientVersion: "bae-bench", Logger: slog.New(slog.DiscardHandler)})
}

func loadPhase(ctx context.Context, hc *http.Client, base, key string, f *fake, o options) (*phase, error) {
	sessions := make([]*sdk.Session, o.sessions)
	errs := make(chan error, o.sessions)
	for i := range sessions {
		s, err := open(ctx, hc, base, key)
		if err != nil {
			return nil, err
		}
		sessions[i] = s
		// Warm-up, all at once: the first turn starts the session's workflow.
		go func() {
			tok := fmt.Sprintf("warm %d %s", i, s.ID)
			_, err := turn(ctx, hc, base, s.ID, s.Key(), tok)
			f.take(tok)
			errs <- err
		}()
	}
	for range sessions {
		if err := <-errs; err != nil {
			return nil, err
		}
	}
	ph := &phase{}
	var mu sync.Mutex
	tickets := make(chan struct{})
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		t := time.NewTicker(time.Duration(float64(time.Second) / o.rate))
		defer t.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-t.C:
				select {
				case tickets <- struct{}{}:
				default: // every session busy: the offered turn is not sent
				}
			}
		}
	}()
	var wg sync.WaitGroup
	cpu0, t0 := benchstack.ProcessCPU(), time.Now()
	for i, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range o.turns {
				select {
				case <-tickets:
				case <-pctx.Done():
					return
				}
				tok := fmt.Sprintf("s%d t%d %s", i, j, s.ID)
				ct, err := turn(pctx, hc, base, s.ID, s.Key(), tok)
				ft, ok := f.take(tok)
				mu.Lock()
				ph.record(ct, ft, ok, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	ph.wall, ph.cpu = time.Since(t0), benchstack.ProcessCPU()-cpu0
	return ph, nil
}

func (ph *phase) record(ct clientTurn, ft *fakeTurn, ok bool, err error) {
	if err != nil || !ok {
		ph.errors++
		return
	}
	ph.turns++
	ph.deltasPerTurn += float64(ct.deltas)
	ph.turnAdded = append(ph.turnAdded, ct.end.Sub(ct.start)-ft.end.Sub(ft.start))
	ph.turnStart = append(ph.turnStart, ft.start.Sub(ct.start))
	if ct.first.IsZero() || ft.at[0].IsZero() || ct.firstDelta.IsZero() || ft.firstByte.IsZero() {
		return // no deltas (stream = false)
	}
	ph.firstAdded = append(ph.firstAdded, ct.firstDelta.Sub(ft.firstByte))
	ph.ttfdAdded = append(ph.ttfdAdded, ct.firstDelta.Sub(ct.start)-ft.firstByte.Sub(ft.start))
	ph.relay = append(ph.relay, ct.first.Sub(ft.at[0]))
	for k := 1; k < tokens; k++ {
		if ct.at[k].IsZero() || ct.at[k-1].IsZero() || ft.at[k].IsZero() || ft.at[k-1].IsZero() {
			continue
		}
		ph.gapAdded = append(ph.gapAdded, ct.at[k].Sub(ct.at[k-1])-ft.at[k].Sub(ft.at[k-1]))
	}
}

var (
	deltaPrefix = []byte(`{"jsonrpc":"2.0","method":"session.delta"`)
	notePrefix  = []byte(`{"jsonrpc":"2.0","method"`)
	textMark    = []byte(`"text":"tk`)
)

// turn sends one message with the deltas opt-in and stamps each token's
// delta as it is read.
func turn(ctx context.Context, hc *http.Client, base, sid, key, text string) (clientTurn, error) {
	ct := clientTurn{start: time.Now()}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	resp, err := benchstack.PostRPC(ctx, hc, base, sid, key, 1, "session.sendMessage", benchstack.UserMessage(text), http.Header{"Bae-Deltas": {"on"}})
	if err != nil {
		return ct, err
	}
	defer resp.Body.Close()
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		now := time.Now()
		if bytes.HasPrefix(line, deltaPrefix) {
			ct.deltas++
			if ct.firstDelta.IsZero() {
				ct.firstDelta = now
			}
			if i := bytes.Index(line, textMark); i >= 0 && i+len(textMark)+3 <= len(line) {
				if k, err := strconv.Atoi(string(line[i+len(textMark) : i+len(textMark)+3])); err == nil && k < tokens {
					if ct.first.IsZero() {
						ct.first = now
					}
					ct.at[k] = now
				}
			}
			continue
		}
		if bytes.HasPrefix(line, notePrefix) {
			continue
		}
		if len(bytes.TrimSpace(line)) > 0 {
			ct.end = now
			if bytes.Contains(line, []byte(`"error"`)) && !bytes.Contains(line, []byte(`"result"`)) {
				return ct, fmt.Errorf("turn failed: %.300s", line)
			}
			return ct, nil
		}
		if err != nil {
			return ct, fmt.Errorf("stream ended without a terminal response: %w", err)
		}
	}
}

// fanout is one session's turns with n observers.
type fanout struct {
	turns int
	cpu   time.Duration
	wall  time.Duration
}

func fanoutPhase(ctx context.Context, hc *http.Client, base, key string, f *fake, n, turns int, cpuprofile string) (fanout, error) {
	s, err := open(ctx, hc, base, key)
	if err != nil {
		return fanout{}, err
	}
	warm := "warm fanout " + s.ID
	if _, err := turn(ctx, hc, base, s.ID, s.Key(), warm); err != nil {
		return fanout{}, err
	}
	f.take(warm)
	self, err := os.Executable()
	if err != nil {
		return fanout{}, err
	}
	cmd := exec.CommandContext(ctx, self, "-observe", strings.Join([]string{base, s.ID, s.Key(), strconv.Itoa(n)}, ","))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fanout{}, err
	}
	if err := cmd.Start(); err != nil {
		return fanout{}, fmt.Errorf("start observers: %w", err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	// The child prints a line once every observer's stream is open.
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		return fanout{}, fmt.Errorf("observers did not start: %w", err)
	}
	stopProfile, err := startProfile(cpuprofile, true)
	if err != nil {
		return fanout{}, err
	}
	defer stopProfile()
	cpu0, t0 := benchstack.ProcessCPU(), time.Now()
	fo := fanout{}
	for j := range turns {
		tok := fmt.Sprintf("fan %d %s", j, s.ID)
		if _, err := turn(ctx, hc, base, s.ID, s.Key(), tok); err != nil {
			return fo, err
		}
		f.take(tok)
		fo.turns++
	}
	fo.cpu, fo.wall = benchstack.ProcessCPU()-cpu0, time.Since(t0)
	return fo, nil
}

// observeChild opens n session.subscribe streams with deltas on and reads
// them (bytes only) until killed.
func observeChild(spec string) {
	parts := strings.Split(spec, ",")
	if len(parts) != 4 {
		fmt.Fprintln(os.Stderr, "observe: want url,session,key,n")
		os.Exit(2)
	}
	base, sid, key := parts[0], parts[1], parts[2]
	n, _ := strconv.Atoi(parts[3])
	hc := benchstack.HTTPClient(n)
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"session.subscribe","params":{}}`)
	var opened sync.WaitGroup
	for range n {
		opened.Add(1)
		go func() {
			req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/sessions/"+sid+"/rpc", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Bae-Deltas", "on")
			resp, err := hc.Do(req)
			opened.Done()
			if err != nil {
				fmt.Fprintln(os.Stderr, "observe:", err)
				return
			}
			if resp.StatusCode != http.StatusOK {
				fmt.Fprintln(os.Stderr, "observe: status", resp.StatusCode)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
		}()
	}
	opened.Wait()
	fmt.Println("open")
	select {}
}

func q(ds []time.Duration) benchstack.Dist { return benchstack.Summarise(ds) }

func print(w io.Writer, o options, phases map[string]*phase, fan map[string]map[int]fanout) {
	s, wh := phases["streaming"], phases["whole"]
	fmt.Fprintf(w, "\nlive turns: fake streams %d tokens %s apart; %d sessions, offered %.0f turns/s, %d turns per session per phase\n\n",
		tokens, o.tokenGap, o.sessions, o.rate, o.turns)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\tstreaming\tstream = false\tstreaming ÷ false")
	fmt.Fprintf(tw, "turns (errors)\t%d (%d)\t%d (%d)\t\n", s.turns, s.errors, wh.turns, wh.errors)
	fmt.Fprintf(tw, "achieved turns/s\t%.1f\t%.1f\t\n", float64(s.turns)/s.wall.Seconds(), float64(wh.turns)/wh.wall.Seconds())
	fmt.Fprintf(tw, "deltas per turn\t%.0f\t%.0f\t\n", s.deltasPerTurn/float64(max(1, s.turns)), wh.deltasPerTurn/float64(max(1, wh.turns)))
	ta, wa := q(s.turnAdded), q(wh.turnAdded)
	fmt.Fprintf(tw, "server-added, whole turn p50 / p99\t%.1f / %.1f ms\t%.1f / %.1f ms\t%.2f× / %.2f×\n", ta.P50, ta.P99, wa.P50, wa.P99, ta.P50/wa.P50, ta.P99/wa.P99)
	sc, wc := benchstack.Ms(s.cpu)/float64(max(1, s.turns)), benchstack.Ms(wh.cpu)/float64(max(1, wh.turns))
	fmt.Fprintf(tw, "process CPU per turn\t%.1f ms\t%.1f ms\t%.2f×\n", sc, wc, sc/wc)
	_ = tw.Flush()
	fa, t, r, g := q(s.firstAdded), q(s.ttfdAdded), q(s.relay), q(s.gapAdded)
	ss, ws := q(s.turnStart), q(wh.turnStart)
	fmt.Fprintf(w, "\nstreaming, per turn:\n")
	fmt.Fprintf(w, "  server-added to the first delta, fake's first byte → client's first delta: p50 %.1f ms, p99 %.1f ms (targets ≤ 5, ≤ 20 ms)\n", fa.P50, fa.P99)
	fmt.Fprintf(w, "  turn start, request sent → provider request at the fake: p50 %.1f ms, p99 %.1f ms (stream = false: %.1f / %.1f ms)\n", ss.P50, ss.P99, ws.P50, ws.P99)
	fmt.Fprintf(w, "  both: time to first delta − fake's time to first byte, each from its own request: p50 %.1f ms, p99 %.1f ms\n", t.P50, t.P99)
	fmt.Fprintf(w, "  first token, fake wrote it → client read it: p50 %.1f ms, p99 %.1f ms\n", r.P50, r.P99)
	fmt.Fprintf(w, "  gap added between consecutive deltas (%d gaps): p50 %.2f ms, p99 %.2f ms, max %.1f ms (target p99 ≤ 5 ms)\n", g.N, g.P50, g.P99, g.Max)
	fmt.Fprintf(w, "\nobservers on one session (%d turns each, CPU of the server process; observers read in a child process):\n", o.obsRun)
	for _, p := range []string{"streaming", "whole"} {
		if !o.fanout {
			break
		}
		one, many := fan[p][1], fan[p][o.observers]
		c1, cn := benchstack.Ms(one.cpu)/float64(max(1, one.turns)), benchstack.Ms(many.cpu)/float64(max(1, many.turns))
		fmt.Fprintf(w, "  %-10s 1 observer %.1f ms CPU per turn, %d observers %.1f ms: %.2f× (target ≤ 2× streaming)\n", p, c1, o.observers, cn, cn/c1)
	}
}
