// Command cost measures what issue 36 asks of prompt caching: what a long
// session bills at Anthropic's prompt-cache prices, how much of each
// request the provider can serve from its cache, how often compaction
// rewrites the cached prefix, and what caching costs bae-go itself.
//
// One fake provider (internal/testing/fakeprovider with its prompt-cache
// emulation: prefix hashing at cache_control breakpoints, 5-minute TTL,
// 1,024-token minimum, at most 4 breakpoints, 20-block look-back; OpenAI's
// automatic prefix caching in 128-token steps) serves every run. A session
// declares 8 client tools (about 2,500 tokens of declarations) and sends
// -turns messages of ~600 bytes, each answered by an echo. For each wire
// format and each window (a large one that never compacts, and one that
// forces compaction), two sessions run turn by turn, alternating: one on a
// provider entry with prompt caching (the default), one with prompt_cache
// = false, so the machine's load falls on both alike. The summarizer is its
// own provider entry (the profile's summarizer_provider, one per session)
// on the same fake, so its calls are counted apart and added to the
// session's bill.
//
// With -thinking, each wire format and window also runs with the model
// thinking (issue 42): Anthropic adaptive thinking on claude-sonnet-4-6,
// which keeps every prior thinking block in its context, and a
// budget_tokens on claude-sonnet-4-5, which strips the thinking of turns
// that ended (the fake applies Anthropic's documented caching rules for
// both); OpenAI reasoning_effort on gpt-5. Every answer then carries a
// thinking block of -thinking-bytes (billed as output), and the fake is
// strict: it refuses a request whose tool cycle lost a thinking block.
// With -steps, every turn first calls read_file that many times (each
// answered with a ~600-byte result), so thinking blocks sit in the cached
// prefix of the tool loop.
//
//	go run ./bench/cost                                   # 1,000 turns, both formats, both windows
//	go run ./bench/cost -turns 300 -kinds openai -windows compacting
//	go run ./bench/cost -turns 300 -steps 2 -thinking off,adaptive,budget,reasoning
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bae-go/bae-go/bench/benchstack"
	"github.com/bae-go/bae-go/internal/compaction"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/sdk"
)

type options struct {
	turns            int
	kinds, windows   string
	thinking         string
	steps            int
	thinkingBytes    int
	largeWindow      int
	compactWindow    int
	maxTokens        int
	db               string
	jsonOut, verbose bool
}

func main() {
	var o options
	flag.IntVar(&o.turns, "turns", 1000, "turns per session")
	flag.StringVar(&o.kinds, "kinds", "anthropic,openai", "wire formats to run (comma-separated)")
	flag.StringVar(&o.windows, "windows", "large,compacting", "windows to run: large (never compacts), compacting")
	flag.IntVar(&o.largeWindow, "large-window", 1_000_000, "the large context window in tokens")
	flag.IntVar(&o.compactWindow, "compacting-window", 40_000, "the context window, in tokens, that forces compaction")
	flag.IntVar(&o.maxTokens, "max-tokens", 1000, "max_tokens of the provider entries")
	flag.StringVar(&o.thinking, "thinking", "off", "thinking modes to run (comma-separated): off, adaptive and budget (anthropic), reasoning (openai)")
	flag.IntVar(&o.steps, "steps", 0, "tool calls per turn before the answer")
	flag.IntVar(&o.thinkingBytes, "thinking-bytes", 1200, "bytes of each answer's thinking block")
	flag.StringVar(&o.db, "db", benchstack.DefaultDatabaseURL(), "maintenance database URL")
	flag.BoolVar(&o.jsonOut, "json", false, "JSON report on stdout")
	flag.BoolVar(&o.verbose, "v", false, "show baesrv/Temporal warnings")
	flag.Parse()
	benchstack.Main("cost", func(ctx context.Context, log *slog.Logger) error {
		reps, err := run(ctx, log, o)
		if err != nil {
			return err
		}
		printReports(os.Stderr, o, reps)
		if o.jsonOut {
			_ = json.NewEncoder(os.Stdout).Encode(reps)
		}
		return nil
	})
}

// fake is the caching fakeprovider, timed: sessions take turns, so
// whatever it served while a turn ran (benchstack.TimedFake) belongs to
// that turn.
type fake struct {
	*benchstack.TimedFake
	inner *fakeprovider.Server
}

// scenario is one wire format, window and thinking mode.
type scenario struct {
	kind, window, mode string
	tokens             int
}

func (s scenario) lane(cached bool) string {
	name := s.kind + "-" + s.window
	if s.mode != "off" {
		name += "-" + s.mode
	}
	if cached {
		return "c-" + name
	}
	return "p-" + name
}

// modesOf are the thinking modes of a wire format.
var modesOf = map[string][]string{"anthropic": {"off", "adaptive", "budget"}, "openai": {"off", "reasoning"}}

// model is the session entry's model and its model_settings for the
// scenario's thinking mode (budget_tokens 1,024 with max_tokens 1,000
// needs the interleaved-thinking beta).
func (s scenario) model() (model, settings string) {
	switch s.mode {
	case "adaptive":
		return "claude-sonnet-4-6", "thinking = { type = \"adaptive\" }\neffort = \"medium\"\n"
	case "budget":
		return "claude-sonnet-4-5", "thinking = { type = \"enabled\", budget_tokens = 1024 }\nheaders = { \"anthropic-beta\" = \"interleaved-thinking-2025-05-14\" }\n"
	case "reasoning":
		return "gpt-5", "reasoning_effort = \"medium\"\n"
	}
	return "bench-model", ""
}

// summarizerLane is the summarizer of the cached (or plain) session.
func (s scenario) summarizerLane(cached bool) string { return "s" + s.lane(cached) }

func run(ctx context.Context, log *slog.Logger, o options) ([]*report, error) {
	f := &fake{inner: fakeprovider.NewHandler()}
	f.inner.Caching(true)
	modes := strings.Split(o.thinking, ",")
	for i, m := range modes {
		modes[i] = strings.TrimSpace(m)
		if m := modes[i]; m != "off" && m != "adaptive" && m != "budget" && m != "reasoning" {
			return nil, fmt.Errorf("unknown thinking mode %q (off, adaptive, budget, reasoning)", m)
		}
	}
	// The strict fake refuses a tool cycle that lost a thinking block.
	f.inner.Strict(o.thinking != "off")
	var scenarios []scenario
	for _, k := range strings.Split(o.kinds, ",") {
		for _, w := range strings.Split(o.windows, ",") {
			for _, mode := range modes {
				sc := scenario{kind: strings.TrimSpace(k), window: strings.TrimSpace(w), mode: mode}
				if !slices.Contains(modesOf[sc.kind], mode) {
					continue
				}
				switch sc.window {
				case "large":
					sc.tokens = o.largeWindow
				case "compacting":
					sc.tokens = o.compactWindow
					// The fake refuses what the window cannot hold, as the
					// providers do.
					f.inner.Lane(sc.lane(true)).ContextWindow(sc.tokens)
					f.inner.Lane(sc.lane(false)).ContextWindow(sc.tokens)
				default:
					return nil, fmt.Errorf("unknown window %q (large or compacting)", w)
				}
				for _, cached := range []bool{true, false} {
					f.inner.Lane(sc.summarizerLane(cached)).Respond(func(rec fakeprovider.Recorded) fakeprovider.Reply {
						return fakeprovider.Text(fmt.Sprintf("The user sent numbered messages of repeated words; the assistant echoed each. This summary replaced %d bytes.", len(rec.RawBody)))
					})
					if sc.mode != "off" || o.steps > 0 {
						f.inner.Lane(sc.lane(cached)).Respond(o.answer)
					}
				}
				scenarios = append(scenarios, sc)
			}
		}
	}
	var err error
	if f.TimedFake, err = benchstack.ServeTimed(f.inner, nil); err != nil {
		return nil, err
	}
	defer f.Close()

	var toml strings.Builder
	for _, sc := range scenarios {
		for _, lane := range []string{sc.lane(true), sc.lane(false), sc.summarizerLane(true), sc.summarizerLane(false)} {
			model, settings := "bench-model", ""
			if !strings.HasPrefix(lane, "s") {
				model, settings = sc.model()
			}
			fmt.Fprintf(&toml, `
[[providers.entries]]
name = %q
provider = %q
base_url = "%s/%s"
model = %q
auth_token = "not-a-secret"
context_window = %d
max_tokens = %d
prompt_cache = %v
`, lane, sc.kind, f.URL, lane, model, sc.tokens, o.maxTokens, !strings.HasPrefix(lane, "p-") && !strings.HasPrefix(lane, "sp-"))
			if settings != "" {
				fmt.Fprintf(&toml, "\n[providers.entries.model_settings]\n%s", settings)
			}
		}
	}
	var srvLog *slog.Logger
	if o.verbose {
		srvLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	st, err := benchstack.StartInProc(ctx, log, benchstack.InProcOptions{BaseDatabaseURL: o.db, ServerLog: srvLog, ConfigTOML: toml.String()})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	hc := benchstack.HTTPClient(4)
	tools := benchTools()
	var names []string
	for _, t := range tools {
		names = append(names, t.Name)
	}
	var reps []*report
	for _, sc := range scenarios {
		var drives [2]*drive
		for i, cached := range []bool{true, false} {
			ck, err := st.Admin.Setup(ctx, map[string]any{
				"name": sc.lane(cached), "primary_provider": sc.lane(cached), "allowed_tools": names,
				"context": map[string]any{"summarizer_provider": sc.summarizerLane(cached)},
			})
			if err != nil {
				return nil, err
			}
			s, err := sdk.Connect(ctx, sdk.Config{ServerURL: st.ClientURL, ClientKey: ck, HTTPClient: hc, ClientVersion: "bae-bench", Logger: slog.New(slog.DiscardHandler)}, sdk.WithTools(tools...))
			if err != nil {
				return nil, fmt.Errorf("open session: %w", err)
			}
			drives[i] = &drive{id: s.ID, key: s.Key(), hc: hc, base: st.ClientURL, f: f, lane: sc.lane(cached), steps: o.steps}
		}
		log.Info("running", "kind", sc.kind, "window", sc.window, "thinking", sc.mode, "context_window", sc.tokens, "turns", o.turns, "steps", o.steps)
		t0 := time.Now()
		for n := range o.turns {
			for _, d := range drives {
				if err := d.turn(ctx); err != nil {
					return nil, err
				}
			}
			if (n+1)%100 == 0 {
				log.Info("progress", "kind", sc.kind, "window", sc.window, "thinking", sc.mode, "turns", n+1, "elapsed", time.Since(t0).Round(time.Second))
			}
		}
		rep := &report{Kind: sc.kind, Window: sc.window, Thinking: sc.mode, Steps: o.steps, ContextWindow: sc.tokens, Turns: o.turns, Wall: time.Since(t0).Seconds()}
		rep.fill(f.inner.CacheLedger(), sc, drives[0], drives[1])
		if rep.Summaries, rep.Clearings, err = compactions(ctx, st.DB.URL, drives[0].id); err != nil {
			return nil, err
		}
		if n := f.inner.StrictRefusals(); n > 0 {
			return nil, fmt.Errorf("the strict fake refused %d requests", n)
		}
		reps = append(reps, rep)
		rep.print(os.Stderr)
	}
	return reps, nil
}

// answer is a session lane's answer: with a thinking block (sent only
// when the request turns thinking on), a read_file call for the first
// -steps answers of a turn, then the echo.
func (o options) answer(rec fakeprovider.Recorded) fakeprovider.Reply {
	step := cycleSteps(rec)
	thought := fmt.Sprintf("Request %d, step %d: the user sent a numbered message of repeated words; I read the file and echo it. ", rec.Seq, step)
	for len(thought) < o.thinkingBytes {
		thought += "Checking the words once more before answering. "
	}
	r := fakeprovider.Reply{}.WithThinking(thought[:o.thinkingBytes])
	if step < o.steps {
		return r.WithToolUse("", "read_file", map[string]any{"path": fmt.Sprintf("src/file_%d.go", step)})
	}
	// The echo of the message's own text: a compaction that summarizes
	// every earlier turn puts the summary in the same user message.
	return r.WithText("echo: " + lastTextBlock(rec))
}

// lastTextBlock is the last text block of the last user message that has
// one.
func lastTextBlock(rec fakeprovider.Recorded) string {
	msgs := rec.Messages()
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i]["role"] != "user" {
			continue
		}
		switch c := msgs[i]["content"].(type) {
		case string:
			return c
		case []any:
			for j := len(c) - 1; j >= 0; j-- {
				if b, _ := c[j].(map[string]any); b["type"] == "text" {
					text, _ := b["text"].(string)
					return text
				}
			}
		}
	}
	return ""
}

// cycleSteps is how many assistant messages the turn in progress has (the
// messages after the last user message that is no tool result).
func cycleSteps(rec fakeprovider.Recorded) int {
	msgs := rec.Messages()
	n := 0
	for i := len(msgs) - 1; i >= 0; i-- {
		switch m := msgs[i]; {
		case m["role"] == "assistant":
			n++
		case m["role"] == "tool":
		case strings.Contains(fmt.Sprint(m["content"]), "tool_result"):
		default:
			return n
		}
	}
	return n
}

// benchTools are 8 client tool declarations of about 2,500 tokens in all,
// the size of a real coding agent's.
func benchTools() []sdk.Tool {
	handler := func(context.Context, json.RawMessage) (any, error) { return "ok", nil }
	prop := func(typ, desc string) map[string]any { return map[string]any{"type": typ, "description": desc} }
	specs := []struct{ name, what string }{
		{"read_file", "Reads a file from the workspace and returns its content with line numbers. Use it before editing a file; large files are returned in pages."},
		{"write_file", "Writes a file in the workspace, replacing its content. Parent directories are created. Prefer edit_file for small changes to existing files."},
		{"edit_file", "Replaces one exact occurrence of a string in a file with another. The old string must match the file byte for byte, including indentation."},
		{"list_directory", "Lists the entries of a directory in the workspace, with their kind and size, sorted by name. Hidden entries are included."},
		{"search_files", "Searches the workspace for a regular expression and returns the matching lines with their paths and line numbers, at most 200 matches."},
		{"run_command", "Runs a shell command in the workspace and returns its exit status, standard output and standard error, each cut to 30,000 bytes."},
		{"fetch_url", "Fetches a URL over HTTP(S) and returns the response as text, HTML converted to Markdown, at most 100,000 bytes."},
		{"ask_user", "Asks the user a question and waits for the answer. Use it when the task is ambiguous or an action needs the user's consent."},
	}
	var tools []sdk.Tool
	for _, s := range specs {
		// About 310 tokens each: a description with usage notes and a schema.
		desc := s.what + " " + strings.Repeat("Notes: paths are relative to the workspace root; errors are returned as text the model can read and act on. ", 8)
		tools = append(tools, sdk.Tool{Name: s.name, Description: desc, Handler: handler, InputSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"path":    prop("string", "Path of the file or directory, relative to the workspace root."),
				"content": prop("string", "Text to write, or the string to look for."),
				"limit":   prop("integer", "At most this many lines, entries or bytes."),
				"timeout": prop("integer", "Seconds before the operation is abandoned."),
			},
			"required": []string{"path"},
		}})
	}
	return tools
}

// drive is one session driven turn by turn.
type drive struct {
	id, key, base, lane string
	hc                  *http.Client
	f                   *fake
	n, steps            int
	rpc                 int
	added               []time.Duration
}

func userText(i int) string {
	return fmt.Sprintf("message %05d: ", i) + strings.Repeat(fmt.Sprintf("word%d ", i%10), 100)[:580]
}

// turn sends the session's next message and records its server-added time
// (latency minus the fake's handler time, summarizer calls included).
func (d *drive) turn(ctx context.Context) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	before := int64(d.f.Served())
	start := time.Now()
	err := d.sendTurn(ctx, userText(d.n))
	lat := time.Since(start)
	if err != nil {
		return fmt.Errorf("session %s (%s) turn %d: %w", d.id, d.lane, d.n+1, err)
	}
	d.added = append(d.added, lat-time.Duration(int64(d.f.Served())-before))
	d.n++
	return nil
}

// sendTurn sends one message, answers each read_file call with a
// ~600-byte result, and checks the turn ends with the echo.
func (d *drive) sendTurn(ctx context.Context, text string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	msg := benchstack.UserMessage(text)
	for step := 0; ; step++ {
		d.rpc++
		resp, err := benchstack.PostRPC(ctx, d.hc, d.base, d.id, d.key, d.rpc, "session.sendMessage", msg, nil)
		if err != nil {
			return err
		}
		a, _, err := benchstack.ReadAnswer(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if len(a.ToolUses) == 0 {
			if a.Text != "echo: "+text {
				return fmt.Errorf("wrong reply: %.200q", a.Text)
			}
			return nil
		}
		if step >= d.steps {
			return fmt.Errorf("tool call %d of a turn of %d steps", step+1, d.steps)
		}
		var results []any
		for _, id := range a.ToolUses {
			results = append(results, map[string]any{"type": "tool_result", "tool_use_id": id, "content": toolResult(d.n, step)})
		}
		msg = map[string]any{"message": map[string]any{"role": "user", "content": results}}
	}
}

// toolResult is a read_file result of ~600 bytes.
func toolResult(turn, step int) string {
	return fmt.Sprintf("file %d.%d:\n", turn, step) + strings.Repeat(fmt.Sprintf("line %d of the file\n", step), 40)[:580]
}

func compactions(ctx context.Context, dbURL, sid string) (summaries, clearings int, err error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, 0, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	err = conn.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE payload->>'layer' = 'summary'),
		count(*) FILTER (WHERE payload->>'layer' <> 'summary')
		FROM session_events WHERE session_id = $1 AND event_type = 'session.compaction'`, sid).Scan(&summaries, &clearings)
	if err != nil {
		err = fmt.Errorf("compaction events: %w", err)
	}
	return
}

// bill is a run's input tokens as the fake billed them.
type bill struct {
	Requests int `json:"requests"`
	Input    int `json:"input_tokens"`
	Uncached int `json:"uncached_tokens"`
	Read     int `json:"cache_read_tokens"`
	Write    int `json:"cache_write_tokens"`
	// Ignored is thinking the model stripped from its context (not input).
	Ignored int `json:"thinking_stripped_tokens"`
	// Billed is in uncached-input-token units at Anthropic's prices.
	Billed float64 `json:"billed_tokens"`
}

func (b *bill) add(l fakeprovider.CacheBilling) {
	b.Requests++
	b.Input += l.Input
	b.Uncached += l.Uncached
	b.Read += l.Read
	b.Write += l.Write
	b.Ignored += l.Ignored
	b.Billed += l.Billed()
}

type report struct {
	Kind          string  `json:"kind"`
	Window        string  `json:"window"`
	Thinking      string  `json:"thinking"`
	Steps         int     `json:"steps"`
	ContextWindow int     `json:"context_window"`
	Turns         int     `json:"turns"`
	Wall          float64 `json:"wall_s"`
	// Session is the cached session's own requests; Summarizer its
	// summarizer's; Plain the session with prompt_cache = false, its
	// summarizer included.
	Session    bill `json:"session"`
	Summarizer bill `json:"summarizer"`
	Plain      bill `json:"plain"`
	// BilledRatio is (session + summarizer billed) ÷ (their input tokens,
	// all at the uncached price).
	BilledRatio float64 `json:"billed_over_uncached"`
	PlainRatio  float64 `json:"plain_billed_over_uncached"`
	CachedShare float64 `json:"cached_share"`
	// Rewrites counts requests whose prefix was not the previous request's
	// (the fake's view: compaction boundaries).
	Rewrites    int     `json:"prefix_rewrites"`
	RewritesPer float64 `json:"prefix_rewrites_per_100_turns"`
	// PrefixShareMin is the smallest share of a request's input that is
	// the byte-identical prefix of the previous request, outside rewrites;
	// PrefixShareUnder90 how many requests (outside rewrites) fall under
	// 90%.
	PrefixShareMin     float64 `json:"prefix_share_min"`
	PrefixShareUnder90 int     `json:"prefix_share_under_90"`
	Summaries          int     `json:"summaries"`
	Clearings          int     `json:"clearings"`
	// ServerAdded is bae-go's own time per turn (latency minus the fake's
	// time), with caching and without.
	ServerAdded      benchstack.Dist `json:"server_added_cached"`
	ServerAddedPlain benchstack.Dist `json:"server_added_plain"`
}

func (r *report) fill(ledger []fakeprovider.CacheBilling, sc scenario, cached, plain *drive) {
	r.PrefixShareMin = 1
	first := true
	for _, l := range ledger {
		switch l.Lane {
		case sc.lane(true):
			r.Session.add(l)
			if l.Rewrite {
				r.Rewrites++
			} else if !first && l.Prompt > 0 {
				share := float64(l.Shared) / float64(l.Prompt)
				r.PrefixShareMin = min(r.PrefixShareMin, share)
				if share < 0.9 {
					r.PrefixShareUnder90++
				}
			}
			first = false
		case sc.summarizerLane(true):
			r.Summarizer.add(l)
		case sc.lane(false), sc.summarizerLane(false):
			r.Plain.add(l)
		}
	}
	in := float64(r.Session.Input + r.Summarizer.Input)
	if in > 0 {
		r.BilledRatio = (r.Session.Billed + r.Summarizer.Billed) / in
		r.CachedShare = float64(r.Session.Read+r.Summarizer.Read) / in
	}
	if r.Plain.Input > 0 {
		r.PlainRatio = r.Plain.Billed / float64(r.Plain.Input)
	}
	r.RewritesPer = 100 * float64(r.Rewrites) / float64(max(r.Turns, 1))
	r.ServerAdded, r.ServerAddedPlain = benchstack.Summarise(cached.added), benchstack.Summarise(plain.added)
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "\n%s, %s window (%d tokens), thinking %s, %d turns of %d tool steps, %.0f s\n", r.Kind, r.Window, r.ContextWindow, r.Thinking, r.Turns, r.Steps, r.Wall)
	fmt.Fprintf(w, "  billed/uncached (Anthropic prices, summarizer included): %.3f   (prompt_cache = false: %.3f)\n", r.BilledRatio, r.PlainRatio)
	fmt.Fprintf(w, "  cached share of input tokens: %.1f%%   input %d, read %d, written %d, uncached %d; summarizer input %d\n",
		100*r.CachedShare, r.Session.Input, r.Session.Read, r.Session.Write, r.Session.Uncached, r.Summarizer.Input)
	if r.Session.Ignored > 0 {
		fmt.Fprintf(w, "  thinking of ended turns stripped by the model (not input): %d tokens\n", r.Session.Ignored)
	}
	fmt.Fprintf(w, "  prefix rewrites: %d (%.1f per 100 turns); summaries %d, clearings %d\n", r.Rewrites, r.RewritesPer, r.Summaries, r.Clearings)
	fmt.Fprintf(w, "  byte-identical prefix of the previous request, outside rewrites: min %.1f%%, %d requests under 90%%\n", 100*r.PrefixShareMin, r.PrefixShareUnder90)
	fmt.Fprintf(w, "  bae-go time per turn: cached p50 %.1f ms mean %.1f ms; prompt_cache = false p50 %.1f ms mean %.1f ms\n",
		r.ServerAdded.P50, r.ServerAdded.Mean, r.ServerAddedPlain.P50, r.ServerAddedPlain.Mean)
}

func printReports(w io.Writer, o options, reps []*report) {
	fmt.Fprintf(w, "\nsummary: %d turns a session, 8 tools (~2,500 tokens), ~600-byte messages, %d read_file calls (~600-byte results) then an echo a turn, %d-byte thinking blocks; compaction target %.0f%% of the budget\n",
		o.turns, o.steps, o.thinkingBytes, 100*compaction.DefaultTrigger*compaction.TargetOfTrigger)
	fmt.Fprintf(w, "%-10s %-11s %-9s %10s %8s %12s %10s %12s %14s\n", "format", "window", "thinking", "billed/unc", "cached", "rewrites/100", "prefix min", "cached p50", "uncached p50")
	for _, r := range reps {
		fmt.Fprintf(w, "%-10s %-11s %-9s %10.3f %7.1f%% %12.1f %9.1f%% %9.1f ms %11.1f ms\n", r.Kind, r.Window, r.Thinking, r.BilledRatio, 100*r.CachedShare, r.RewritesPer, 100*r.PrefixShareMin, r.ServerAdded.P50, r.ServerAddedPlain.P50)
	}
	// Thinking against no thinking, same format and window, same run.
	for _, r := range reps {
		if r.Thinking == "off" {
			continue
		}
		for _, off := range reps {
			if off.Thinking == "off" && off.Kind == r.Kind && off.Window == r.Window {
				fmt.Fprintf(w, "%s/%s thinking %s ÷ off: billed input %.2f×, input tokens %.2f×, billed/uncached %.3f ÷ %.3f, cached share %.1f%% ÷ %.1f%%\n",
					r.Kind, r.Window, r.Thinking, (r.Session.Billed+r.Summarizer.Billed)/(off.Session.Billed+off.Summarizer.Billed),
					float64(r.Session.Input+r.Summarizer.Input)/float64(off.Session.Input+off.Summarizer.Input),
					r.BilledRatio, off.BilledRatio, 100*r.CachedShare, 100*off.CachedShare)
			}
		}
	}
	for _, r := range reps {
		verdict := "PASS"
		switch {
		case r.Kind == "anthropic" && r.Window == "large" && r.BilledRatio > 0.15,
			r.Kind == "anthropic" && r.Window == "compacting" && r.BilledRatio > 0.30,
			r.Kind == "openai" && r.PrefixShareUnder90 > 0:
			verdict = "MISS"
		}
		target := map[string]string{"anthropic/large": "billed/uncached ≤ 0.15", "anthropic/compacting": "billed/uncached ≤ 0.30"}[r.Kind+"/"+r.Window]
		if r.Kind == "openai" {
			target = "every request ≥ 90% previous prefix outside rewrites"
		}
		fmt.Fprintf(w, "target %s/%s, thinking %s: %s: %s\n", r.Kind, r.Window, r.Thinking, target, verdict)
	}
}
