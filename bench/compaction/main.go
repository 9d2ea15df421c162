// Command compaction measures what issue 24 asks of a compacting session:
// that a turn late in a long session costs about what an early one costs.
// One session on a provider whose context window the fake enforces (it
// refuses a longer request as too long, as Anthropic and OpenAI do) is
// driven to turn 1,000 with messages of about 600 bytes; the bench prints,
// at turn ~50 and at turn ~1,000, the provider.request bytes bae-go sent and
// stored, the database bytes each turn wrote, and the server-added time
// (client latency minus the time the fake spent in its handler for that
// turn, summarizer calls included), and their late ÷ early ratio (target
// ≤ 1.2×).
//
//	go run ./bench/compaction                 # 1,000 turns, anthropic wire format
//	go run ./bench/compaction -kind openai -turns 300
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/internal/compaction"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/sdk"
)

type options struct {
	turns, early, window int
	kind                 string
	windowTokens         int
	db                   string
	jsonOut, verbose     bool
	slowMs               int
}

func main() {
	var o options
	flag.IntVar(&o.turns, "turns", 1000, "turns to drive the session to")
	flag.IntVar(&o.early, "early", 50, "the early turn the late one is compared with")
	flag.IntVar(&o.window, "window", 20, "turns measured around each point (the early point's centre, the last ones)")
	flag.StringVar(&o.kind, "kind", "anthropic", "wire format of the provider entry: anthropic or openai")
	flag.IntVar(&o.windowTokens, "context-window", 10_000, "the provider's context window in tokens (4 bytes each as the fake counts)")
	flag.StringVar(&o.db, "db", benchstack.DefaultDatabaseURL(), "maintenance database URL")
	flag.BoolVar(&o.jsonOut, "json", false, "JSON report on stdout")
	flag.BoolVar(&o.verbose, "v", false, "show baesrv/Temporal warnings")
	flag.IntVar(&o.slowMs, "log-slow-ms", 0, "diagnostic: PostgreSQL logs the bench database's statements slower than this (server log)")
	flag.Parse()
	benchstack.Main("compaction", func(ctx context.Context, log *slog.Logger) error {
		rep, err := run(ctx, log, o)
		if err != nil {
			return err
		}
		rep.print(os.Stderr)
		if o.jsonOut {
			_ = json.NewEncoder(os.Stdout).Encode(rep)
		}
		return nil
	})
}

// fake counts the session's own requests and the summarizer's apart; the
// bench drives one session one turn at a time, so whatever the fake served
// while a turn ran (benchstack.TimedFake) belongs to that turn.
type fake struct {
	*benchstack.TimedFake
	inner      *fakeprovider.Server
	mainBytes  atomic.Int64 // bodies of the session's own requests
	mainReqs   atomic.Int64
	summarizes atomic.Int64
}

func (f *fake) seen(body []byte) {
	if bytes.Contains(body, []byte(compaction.SummaryInstruction[:60])) {
		f.summarizes.Add(1)
		return
	}
	f.mainBytes.Add(int64(len(body)))
	f.mainReqs.Add(1)
}

type counters struct {
	fakeNs, mainBytes, mainReqs, summarizes int64
	cpu                                     time.Duration
}

func (f *fake) read() counters {
	return counters{int64(f.Served()), f.mainBytes.Load(), f.mainReqs.Load(), f.summarizes.Load(), benchstack.ProcessCPU()}
}

// turnCost is one turn as measured.
type turnCost struct {
	n            int
	added        time.Duration
	reqBytes     int64 // provider request bodies bae-go sent (summarizer calls apart)
	requests     int64
	summarized   bool
	cpu          time.Duration
	streamBytes  int64
	storedReqLen int64 // the turn's provider.request payload as stored
	dbBytes      int64 // the turn's rows: its events, messages, input and summaries
	rawBytes     int64 // its events' payloads and its messages' contents, uncompressed
}

func userText(i int) string {
	return fmt.Sprintf("message %05d: ", i) + strings.Repeat(fmt.Sprintf("word%d ", i%10), 100)[:580]
}

func run(ctx context.Context, log *slog.Logger, o options) (*report, error) {
	f := &fake{inner: fakeprovider.NewHandler()}
	lane := f.inner.Lane("small")
	lane.ContextWindow(o.windowTokens)
	lane.Respond(func(rec fakeprovider.Recorded) fakeprovider.Reply {
		if strings.HasPrefix(rec.LastUserText(), compaction.SummaryInstruction[:40]) {
			return fakeprovider.Text(fmt.Sprintf("The user sent numbered messages of repeated words; this summary replaced %d bytes.", len(rec.RawBody)))
		}
		return fakeprovider.Echo()
	})
	var err error
	if f.TimedFake, err = benchstack.ServeTimed(f.inner, f.seen); err != nil {
		return nil, err
	}
	defer f.Close()

	var srvLog *slog.Logger
	if o.verbose {
		srvLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	var dbSettings map[string]string
	if o.slowMs > 0 {
		dbSettings = map[string]string{"log_min_duration_statement": strconv.Itoa(o.slowMs)}
	}
	st, err := benchstack.StartInProc(ctx, log, benchstack.InProcOptions{
		BaseDatabaseURL: o.db, ServerLog: srvLog, DBSettings: dbSettings,
		ConfigTOML: fmt.Sprintf(`
[[providers.entries]]
name = "small"
provider = %q
base_url = "%s/small"
model = "small-model"
auth_token = "not-a-secret"
context_window = %d
max_tokens = 1000
`, o.kind, f.URL, o.windowTokens),
	})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	ck, err := st.Admin.Setup(ctx, map[string]any{"name": "compacting", "primary_provider": "small", "allowed_tools": []string{}})
	if err != nil {
		return nil, err
	}
	hc := benchstack.HTTPClient(4)
	openSession := func() (*drive, error) {
		s, err := sdk.Connect(ctx, sdk.Config{ServerURL: st.ClientURL, ClientKey: ck, HTTPClient: hc, ClientVersion: "bae-bench", Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return nil, fmt.Errorf("open session: %w", err)
		}
		return &drive{id: s.ID, key: s.Key(), hc: hc, base: st.ClientURL, f: f}, nil
	}
	long, err := openSession()
	if err != nil {
		return nil, err
	}
	early, err := openSession()
	if err != nil {
		return nil, err
	}
	// The late window is measured on the long session and the early one on
	// a second session, in alternating blocks, so a change in the machine's
	// load falls on both.
	lateFrom := max(o.turns-o.window, 0)
	earlyFrom := max(o.early-o.window/2, 0)
	log.Info("building the long session", "turns", lateFrom, "kind", o.kind, "context_window", o.windowTokens)
	t0 := time.Now()
	for long.n < lateFrom {
		if _, err := long.turn(ctx); err != nil {
			return nil, err
		}
		if long.n%100 == 0 {
			log.Info("progress", "turns", long.n, "elapsed", time.Since(t0).Round(time.Second))
		}
	}
	for early.n < earlyFrom {
		if _, err := early.turn(ctx); err != nil {
			return nil, err
		}
	}
	log.Info("measuring", "early_from", earlyFrom+1, "late_from", lateFrom+1)
	var ec, lc []turnCost
	const block = 5
	for len(ec) < o.window || len(lc) < o.window {
		for _, x := range []struct {
			d  *drive
			cs *[]turnCost
		}{{early, &ec}, {long, &lc}} {
			for range min(block, o.window-len(*x.cs)) {
				c, err := x.d.turn(ctx)
				if err != nil {
					return nil, err
				}
				*x.cs = append(*x.cs, c)
			}
		}
	}
	if err := storedSizes(ctx, st.DB.URL, early.id, ec); err != nil {
		return nil, err
	}
	if err := storedSizes(ctx, st.DB.URL, long.id, lc); err != nil {
		return nil, err
	}
	rep := &report{Options: o, Refusals: lane.Refusals(), Wall: time.Since(t0).Seconds()}
	rep.Summaries, rep.Clearings, rep.StoredRequestBytes, rep.EventsBytes, rep.RowBytes, err = sessionTotals(ctx, st.DB.URL, long.id)
	if err != nil {
		return nil, err
	}
	rep.Early, rep.Late = summarize(ec), summarize(lc)
	return rep, nil
}

// drive is one session driven turn by turn.
type drive struct {
	id, key, base string
	hc            *http.Client
	f             *fake
	n             int // turns sent
}

// turn sends the session's next message and measures it. Sessions take
// turns, never run together, so whatever the fake served while a turn ran
// belongs to it.
func (d *drive) turn(ctx context.Context) (turnCost, error) {
	if ctx.Err() != nil {
		return turnCost{}, ctx.Err()
	}
	i := d.n
	before := d.f.read()
	start := time.Now()
	res, err := turn(ctx, d.hc, d.base, d.id, d.key, i, userText(i))
	lat := time.Since(start)
	after := d.f.read()
	if err != nil {
		return turnCost{}, fmt.Errorf("session %s turn %d: %w", d.id, i+1, err)
	}
	d.n++
	return turnCost{
		n: i + 1, added: lat - time.Duration(after.fakeNs-before.fakeNs),
		reqBytes: after.mainBytes - before.mainBytes, requests: after.mainReqs - before.mainReqs,
		summarized: after.summarizes > before.summarizes, cpu: after.cpu - before.cpu, streamBytes: res.bytes,
	}, nil
}

type turnResult struct {
	bytes int64
}

// turn sends one message and reads its stream to the terminal response,
// counting bytes and decoding only the terminal line.
func turn(ctx context.Context, hc *http.Client, base, sid, key string, n int, text string) (turnResult, error) {
	var out turnResult
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	resp, err := benchstack.PostRPC(ctx, hc, base, sid, key, n+1, "session.sendMessage", benchstack.UserMessage(text), nil)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	out.bytes, err = benchstack.ReadEcho(resp.Body, text)
	return out, err
}

// storedSizes fills in each measured turn's stored provider.request
// payload size and the bytes of every row the turn wrote (its events, its
// messages, its turn_inputs row and the summaries it stored, each row as
// pg_column_size counts it), in the order the turns' messages were stored,
// which is the order sent.
func storedSizes(ctx context.Context, dbURL, sid string, costs []turnCost) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `WITH ev AS (
			SELECT turn_id, min(seq) AS first,
				coalesce(sum(octet_length(payload::text)) FILTER (WHERE event_type = 'provider.request'), 0) AS req,
				sum(pg_column_size(e.*)) AS bytes, sum(octet_length(payload::text)) AS raw
			FROM session_events e WHERE session_id = $1 AND turn_id IS NOT NULL AND turn_id <> ''
			GROUP BY turn_id HAVING count(*) FILTER (WHERE event_type = 'client.message.send') > 0),
		msg AS (SELECT split_part(idem_key, '/', 1) AS turn_id, sum(pg_column_size(m.*)) AS bytes, sum(octet_length(content::text)) AS raw
			FROM session_messages m WHERE session_id = $1 GROUP BY 1),
		sm AS (SELECT split_part(id, '/', 1) AS turn_id, sum(pg_column_size(s.*)) AS bytes
			FROM session_summaries s WHERE session_id = $1 GROUP BY 1)
		SELECT ev.req, (ev.bytes + coalesce(msg.bytes, 0) + coalesce(sm.bytes, 0)
			+ coalesce((SELECT pg_column_size(t.*) FROM turn_inputs t WHERE t.turn_id = ev.turn_id), 0))::int8,
			(ev.raw + coalesce(msg.raw, 0))::int8
		FROM ev LEFT JOIN msg USING (turn_id) LEFT JOIN sm USING (turn_id) ORDER BY ev.first`, sid)
	if err != nil {
		return fmt.Errorf("stored sizes: %w", err)
	}
	type sizes struct{ req, db, raw int64 }
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sizes, error) {
		var s sizes
		err := r.Scan(&s.req, &s.db, &s.raw)
		return s, err
	})
	if err != nil {
		return fmt.Errorf("stored sizes: %w", err)
	}
	for i := range costs {
		if n := costs[i].n - 1; n < len(got) {
			costs[i].storedReqLen, costs[i].dbBytes, costs[i].rawBytes = got[n].req, got[n].db, got[n].raw
		}
	}
	return nil
}

func sessionTotals(ctx context.Context, dbURL, sid string) (summaries, clearings int, reqBytes, allBytes, rowBytes int64, err error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, 0, 0, 0, 0, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	err = conn.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE event_type = 'session.compaction' AND payload->>'layer' = 'summary'),
		count(*) FILTER (WHERE event_type = 'session.compaction' AND payload->>'layer' <> 'summary'),
		coalesce(sum(octet_length(payload::text)) FILTER (WHERE event_type = 'provider.request'), 0),
		coalesce(sum(octet_length(payload::text)), 0)
		FROM session_events WHERE session_id = $1`, sid).Scan(&summaries, &clearings, &reqBytes, &allBytes)
	if err == nil {
		err = conn.QueryRow(ctx, `SELECT
			(SELECT coalesce(sum(pg_column_size(e.*)), 0) FROM session_events e WHERE session_id = $1)
			+ (SELECT coalesce(sum(pg_column_size(m.*)), 0) FROM session_messages m WHERE session_id = $1)
			+ (SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM turn_inputs t WHERE session_id = $1)
			+ (SELECT coalesce(sum(pg_column_size(s.*)), 0) FROM session_summaries s WHERE session_id = $1)`, sid).Scan(&rowBytes)
	}
	if err != nil {
		err = fmt.Errorf("session totals: %w", err)
	}
	return
}

// point is the cost of a window of turns.
type point struct {
	From        int             `json:"from_turn"`
	Through     int             `json:"through_turn"`
	ServerAdded benchstack.Dist `json:"server_added"`
	// ServerAddedPlain leaves out the turns that summarized.
	ServerAddedPlain benchstack.Dist `json:"server_added_without_summarizing_turns"`
	Summarizing      int             `json:"summarizing_turns"`
	RequestBytes     float64         `json:"provider_request_bytes_per_turn"`
	StoredBytes      float64         `json:"stored_provider_request_bytes_per_turn"`
	DBBytes          float64         `json:"database_row_bytes_per_turn"`
	RawBytes         float64         `json:"event_and_message_bytes_per_turn"`
	StreamBytes      float64         `json:"stream_bytes_per_turn"`
	CPUMs            float64         `json:"process_cpu_ms_per_turn"`
}

func summarize(cs []turnCost) point {
	var p point
	if len(cs) == 0 {
		return p
	}
	p.From, p.Through = cs[0].n, cs[len(cs)-1].n
	var all, plain []time.Duration
	var req, stored, stream, db, raw int64
	var cpu time.Duration
	for _, c := range cs {
		all = append(all, c.added)
		if c.summarized {
			p.Summarizing++
		} else {
			plain = append(plain, c.added)
		}
		req += c.reqBytes
		stored += c.storedReqLen
		db += c.dbBytes
		raw += c.rawBytes
		stream += c.streamBytes
		cpu += c.cpu
	}
	n := float64(len(cs))
	p.ServerAdded, p.ServerAddedPlain = benchstack.Summarise(all), benchstack.Summarise(plain)
	p.RequestBytes, p.StoredBytes, p.StreamBytes, p.DBBytes = float64(req)/n, float64(stored)/n, float64(stream)/n, float64(db)/n
	p.RawBytes = float64(raw) / n
	p.CPUMs = benchstack.Ms(cpu) / n
	return p
}

type report struct {
	Options            options `json:"-"`
	Early              point   `json:"early"`
	Late               point   `json:"late"`
	Refusals           int     `json:"too_long_refusals"`
	Summaries          int     `json:"summaries"`
	Clearings          int     `json:"clearings"`
	StoredRequestBytes int64   `json:"stored_provider_request_bytes_total"`
	EventsBytes        int64   `json:"stored_event_payload_bytes_total"`
	RowBytes           int64   `json:"database_row_bytes_total"`
	Wall               float64 `json:"wall_s"`
}

func ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func (r *report) print(w io.Writer) {
	o := r.Options
	fmt.Fprintf(w, "\ncompacting session: %d turns of ~600 bytes, %s wire format, context window %d tokens; %.0f s\n",
		o.turns, o.kind, o.windowTokens, r.Wall)
	fmt.Fprintf(w, "summaries %d, clearings %d, too-long refusals %d; stored provider.request payloads %.1f MiB, all event payloads %.1f MiB, the long session's rows %.1f MiB\n\n",
		r.Summaries, r.Clearings, r.Refusals, float64(r.StoredRequestBytes)/(1<<20), float64(r.EventsBytes)/(1<<20), float64(r.RowBytes)/(1<<20))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\tturns %d–%d\tturns %d–%d\tlate ÷ early\n", r.Early.From, r.Early.Through, r.Late.From, r.Late.Through)
	row := func(name string, e, l float64, unit string) {
		fmt.Fprintf(tw, "%s\t%.1f %s\t%.1f %s\t%s\n", name, e, unit, l, unit, ratio(l, e))
	}
	row("provider.request bytes sent", r.Early.RequestBytes, r.Late.RequestBytes, "B")
	row("provider.request bytes stored", r.Early.StoredBytes, r.Late.StoredBytes, "B")
	row("database bytes written (rows, compressed)", r.Early.DBBytes, r.Late.DBBytes, "B")
	row("event payloads + messages (uncompressed)", r.Early.RawBytes, r.Late.RawBytes, "B")
	row("server-added p50", r.Early.ServerAdded.P50, r.Late.ServerAdded.P50, "ms")
	row("server-added mean", r.Early.ServerAdded.Mean, r.Late.ServerAdded.Mean, "ms")
	row("server-added p50, no summarizing", r.Early.ServerAddedPlain.P50, r.Late.ServerAddedPlain.P50, "ms")
	row("process CPU per turn", r.Early.CPUMs, r.Late.CPUMs, "ms")
	row("stream bytes per turn", r.Early.StreamBytes, r.Late.StreamBytes, "B")
	fmt.Fprintf(tw, "summarizing turns\t%d\t%d\t\n", r.Early.Summarizing, r.Late.Summarizing)
	_ = tw.Flush()
	verdict := "MISS"
	if r.Early.ServerAdded.P50 > 0 && r.Late.ServerAdded.P50/r.Early.ServerAdded.P50 <= 1.2 &&
		r.Early.RequestBytes > 0 && r.Late.RequestBytes/r.Early.RequestBytes <= 1.2 {
		verdict = "PASS"
	}
	fmt.Fprintf(w, "\ntarget: late ÷ early ≤ 1.2× for provider.request bytes and server-added p50: %s\n", verdict)
	verdict = "MISS"
	if r.Early.DBBytes > 0 && r.Late.DBBytes/r.Early.DBBytes <= 1.2 {
		verdict = "PASS"
	}
	fmt.Fprintf(w, "target: late ÷ early ≤ 1.2× for database bytes written per turn: %s\n", verdict)
}
