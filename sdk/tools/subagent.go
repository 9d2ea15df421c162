package tools

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/bae-go/bae-go/cmdtemplate"
	"github.com/bae-go/bae-go/sdk"
)

// Names and limits shared with the other SDKs and the server.
const (
	LaunchSubagentName      = "launch_subagent"
	LocalSubagentStatusName = "local_subagent_status"
	DefaultSubagentTimeout  = 600 * time.Second
	MaxSubagentsPerSession  = 8
	SubagentOutputCap       = 65536 // bytes, per stream
)

// PromptVia says how a CLI receives its prompt.
type PromptVia string

// Prompt delivery modes.
const (
	// PromptViaStdin pipes the prompt, byte for byte, to the CLI's stdin;
	// the template must not contain {prompt}.
	PromptViaStdin PromptVia = "stdin"
	// PromptViaArg substitutes the single-quoted prompt for {prompt}.
	PromptViaArg PromptVia = "arg"
)

// SubagentDef configures one CLI harness the model may launch.
type SubagentDef struct {
	// Harness is the name the model picks, e.g. "claude".
	Harness string
	// CommandTemplate is the shell command; {model} (and {prompt} with
	// PromptViaArg, exactly once) are replaced by single-quoted values.
	// Placeholders must be bare words (cmdtemplate.Parse), the model name
	// must match cmdtemplate.ModelPattern, and a prompt beginning with "-"
	// is refused unless a "--" word comes before {prompt}
	// (`claude -p -- {prompt}`).
	CommandTemplate string
	// PromptVia defaults to PromptViaStdin.
	PromptVia PromptVia
	// Timeout defaults to DefaultSubagentTimeout.
	Timeout time.Duration
}

// checkedDef is a SubagentDef with its defaults applied and its template
// parsed.
type checkedDef struct {
	SubagentDef
	tpl *cmdtemplate.Template
}

func checkDefs(defs []SubagentDef) ([]checkedDef, []string, error) {
	if len(defs) == 0 {
		return nil, nil, errors.New("launch_subagent needs at least one SubagentDef")
	}
	out := make([]checkedDef, 0, len(defs))
	var names []string
	for _, d := range defs {
		if strings.TrimSpace(d.Harness) == "" {
			return nil, nil, errors.New("subagent harness without a name")
		}
		if slices.Contains(names, d.Harness) {
			return nil, nil, fmt.Errorf("subagent harness %q defined twice", d.Harness)
		}
		names = append(names, d.Harness)
		if d.PromptVia == "" {
			d.PromptVia = PromptViaStdin
		}
		if d.Timeout <= 0 {
			d.Timeout = DefaultSubagentTimeout
		}
		tpl, err := cmdtemplate.ParseSubagent(d.CommandTemplate, string(d.PromptVia))
		if err != nil {
			return nil, nil, fmt.Errorf("subagent %q: %w", d.Harness, err)
		}
		out = append(out, checkedDef{SubagentDef: d, tpl: tpl})
	}
	return out, names, nil
}

func launchDescription(names []string) string {
	return fmt.Sprintf("Launch a CLI subagent (%s) on a task in the background. ASYNCHRONOUS: returns at once with a subagent_id and status \"started\", never with the subagent's output. Check on it later with the subagent status tool, which returns the output once it has finished.", strings.Join(names, ", "))
}

func launchSchema(names []string) map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"harness": map[string]any{"type": "string", "enum": names, "description": "Which configured CLI subagent to launch."},
			"model":   map[string]any{"type": "string", "description": "The model name passed to the subagent CLI."},
			"prompt":  map[string]any{"type": "string", "description": "The task for the subagent."},
		},
		"required":             []string{"harness", "model", "prompt"},
		"additionalProperties": false,
	}
}

// RemoteSubagents declares a server-launched launch_subagent tool for
// sdk.WithSubagentTool. The server runs the CLIs inside the session's remote
// sandbox, which must be running and started from image.
func RemoteSubagents(image string, defs ...SubagentDef) (sdk.SubagentToolSpec, error) {
	if strings.TrimSpace(image) == "" {
		return sdk.SubagentToolSpec{}, errors.New("remote subagents need an image")
	}
	checked, names, err := checkDefs(defs)
	if err != nil {
		return sdk.SubagentToolSpec{}, err
	}
	spec := sdk.SubagentToolSpec{Name: LaunchSubagentName, Description: launchDescription(names), InputSchema: launchSchema(names), Image: image}
	for _, d := range checked {
		spec.Subagents = append(spec.Subagents, sdk.SubagentCommand{
			Harness: d.Harness, CommandTemplate: d.CommandTemplate, PromptVia: string(d.PromptVia), TimeoutSecs: int(d.Timeout / time.Second),
		})
	}
	return spec, nil
}

// SubagentStatus is one entry of the status tool's answer.
type SubagentStatus struct {
	SubagentID string `json:"subagent_id"`
	Harness    string `json:"harness"`
	Model      string `json:"model"`
	// Status: running, completed, failed, timed_out or cancelled.
	Status    string  `json:"status"`
	ExitCode  *int    `json:"exit_code"`
	Stdout    *string `json:"stdout"`
	Stderr    *string `json:"stderr"`
	Truncated bool    `json:"truncated"`
	Reason    *string `json:"reason"`
	Detail    *string `json:"detail"`
}

type task struct {
	seq    int
	info   SubagentStatus
	cancel context.CancelFunc
	done   chan struct{}
}

func (t *task) terminal() bool { return t.info.Status != "running" }

// LocalSubagents launches CLI subagents from this harness and tracks them:
// launch_subagent is a client tool answering at once with a subagent_id;
// local_subagent_status is declared (session.updateClientTools) only while
// something is tracked, and returns each finished subagent's output once.
// Every transition is reported with session.reportLocalSubagent. The
// profile's allowed_tools must list both tool names.
//
// A LocalSubagents belongs to one session: pass Option to Connect or Join.
type LocalSubagents struct {
	target Executor
	defs   map[string]checkedDef
	names  []string

	// mu serializes task-set changes together with the tool-list update
	// they imply, so concurrent launches cannot pass the cap and an older
	// removal cannot overwrite a newer addition.
	mu     sync.Mutex
	tasks  map[string]*task
	seq    int
	sess   *sdk.Session
	closed bool
	wg     sync.WaitGroup
}

// NewLocalSubagents configures subagents run by target: Host{} (the
// harness host), a *LocalSandbox (docker exec), or Remote{} (the session's
// remote sandbox; it has no stdin, so every def needs PromptViaArg). Other
// executors are accepted under the same no-stdin rule.
func NewLocalSubagents(target Executor, defs ...SubagentDef) (*LocalSubagents, error) {
	if target == nil {
		return nil, errors.New("local subagents need a target executor")
	}
	checked, names, err := checkDefs(defs)
	if err != nil {
		return nil, err
	}
	m := &LocalSubagents{target: target, defs: map[string]checkedDef{}, names: names, tasks: map[string]*task{}}
	for _, d := range checked {
		if d.PromptVia == PromptViaStdin && !takesStdin(target) {
			return nil, fmt.Errorf("subagent %q: target %T has no stdin; use PromptViaArg", d.Harness, target)
		}
		m.defs[d.Harness] = d
	}
	return m, nil
}

func takesStdin(ex Executor) bool {
	switch ex.(type) {
	case Host, *Host, *LocalSandbox:
		return true
	}
	return false
}

// Option registers launch_subagent, the (initially undeclared) status tool,
// and a close hook cancelling what still runs.
func (m *LocalSubagents) Option() sdk.Option {
	return sdk.WithOptions(
		sdk.WithTool(sdk.Tool{Name: LaunchSubagentName, Description: launchDescription(m.names), InputSchema: launchSchema(m.names), Handler: m.launch}),
		sdk.WithDynamicTool(sdk.Tool{Name: LocalSubagentStatusName, Description: statusDescription, InputSchema: statusSchema(), Handler: m.status}),
		sdk.WithCloseHook(m.close),
	)
}

const statusDescription = "Check on subagents started with launch_subagent. Pass subagent_id for one, or nothing for all. A finished subagent is reported, with its output, exactly once."

func statusSchema() map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"subagent_id": map[string]any{"type": "string", "description": "The subagent to check; omit for all."},
		},
		"additionalProperties": false,
	}
}

func newSubagentID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand contract)
	return "sba_" + hex.EncodeToString(b)
}

func ptr[T any](v T) *T { return &v }

// launch is the launch_subagent handler.
func (m *LocalSubagents) launch(ctx context.Context, raw json.RawMessage) (any, error) {
	var in map[string]any
	_ = json.Unmarshal(raw, &in)
	field := func(k string) string {
		s, _ := in[k].(string)
		if strings.TrimSpace(s) == "" {
			return ""
		}
		return s
	}
	harness, model, prompt := field("harness"), field("model"), field("prompt")
	if harness == "" || model == "" || prompt == "" {
		return inBand(`launch_subagent requires string "harness", "model" and "prompt"`), nil
	}
	def, ok := m.defs[harness]
	if !ok {
		return inBand("unknown harness %q", harness), nil
	}
	cmd, err := def.tpl.ExpandSubagent(model, prompt)
	if err != nil {
		return inBand("launch_subagent: %v", err), nil
	}
	var stdin []byte
	if def.PromptVia == PromptViaStdin {
		stdin = []byte(prompt) // raw, unchanged
	}
	sess := sdk.SessionFromContext(ctx)
	if sess == nil {
		return nil, errNoSession
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return inBand("the session is closing"), nil
	}
	m.sess = sess
	running := 0
	for _, t := range m.tasks {
		if !t.terminal() {
			running++
		}
	}
	if running >= MaxSubagentsPerSession {
		return inBand("subagent limit reached (max %d per session)", MaxSubagentsPerSession), nil
	}
	id := newSubagentID()
	wasEmpty := len(m.tasks) == 0
	// The subagent outlives this tool call: keep ctx's values (the session,
	// the trace) but not its cancellation.
	runCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), def.Timeout)
	t := &task{seq: m.seq, cancel: cancel, done: make(chan struct{}),
		info: SubagentStatus{SubagentID: id, Harness: harness, Model: model, Status: "running"}}
	m.seq++
	m.tasks[id] = t
	m.report(ctx, sdk.LocalSubagentReport{State: sdk.SubagentStart, SubagentID: id, Harness: harness, Model: model})

	runningReported := make(chan struct{})
	m.wg.Add(1)
	go m.watch(runCtx, t, cmd, stdin, runningReported)
	m.report(ctx, sdk.LocalSubagentReport{State: sdk.SubagentRunning, SubagentID: id, Harness: harness, Model: model})
	if wasEmpty {
		m.syncTools(ctx, true)
	}
	// A fast process must not report its end before running was reported.
	close(runningReported)
	return jsonText(map[string]string{"subagent_id": id, "harness": harness, "model": model, "status": "started"})
}

// execute runs one subagent command on the configured target.
func (m *LocalSubagents) execute(ctx context.Context, cmd string, stdin []byte) (procResult, error) {
	switch t := m.target.(type) {
	case Host, *Host:
		return runProcess(ctx, stdin, SubagentOutputCap, "/bin/sh", "-c", cmd)
	case *LocalSandbox:
		return t.exec(ctx, stdin, SubagentOutputCap, cmd)
	default:
		res, err := t.Exec(ctx, cmd)
		return procResult{ExecResult: res}, err
	}
}

func (m *LocalSubagents) watch(ctx context.Context, t *task, cmd string, stdin []byte, runningReported <-chan struct{}) {
	defer m.wg.Done()
	defer close(t.done)
	res, err := m.execute(ctx, cmd, stdin)
	timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded)
	t.cancel()
	<-runningReported

	m.mu.Lock()
	defer m.mu.Unlock()
	if t.terminal() {
		return // cancelled (explicitly or by close) while it ran
	}
	info := &t.info
	state := sdk.SubagentFailed
	switch {
	case timedOut:
		info.Status, info.Reason = "timed_out", ptr("timeout")
	case err != nil:
		info.Status, info.Reason, info.Detail = "failed", ptr("spawn_failed"), ptr(err.Error())
	default:
		stdout, so := capUTF8(res.Stdout, SubagentOutputCap)
		stderr, se := capUTF8(res.Stderr, SubagentOutputCap)
		info.Stdout, info.Stderr, info.ExitCode = &stdout, &stderr, ptr(res.ExitCode)
		info.Truncated = so || se || res.stdoutOver || res.stderrOver
		if res.ExitCode == 0 {
			info.Status, state = "completed", sdk.SubagentCompleted
		} else {
			info.Status, info.Reason = "failed", ptr("nonzero_exit")
		}
	}
	r := sdk.LocalSubagentReport{State: state, SubagentID: info.SubagentID, Harness: info.Harness, Model: info.Model, ExitCode: info.ExitCode}
	if info.Reason != nil {
		r.Reason = *info.Reason
	}
	if info.Detail != nil {
		r.Detail = *info.Detail
	}
	m.report(ctx, r)
}

// capUTF8 cuts s to at most n bytes on a rune boundary.
func capUTF8(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i], true
}

// status is the local_subagent_status handler.
func (m *LocalSubagents) status(ctx context.Context, raw json.RawMessage) (any, error) {
	var in struct {
		SubagentID string `json:"subagent_id"`
	}
	_ = json.Unmarshal(raw, &in)

	m.mu.Lock()
	defer m.mu.Unlock()
	var entries []SubagentStatus
	if in.SubagentID != "" {
		t, ok := m.tasks[in.SubagentID]
		if !ok {
			return inBand("unknown subagent_id %q", in.SubagentID), nil
		}
		entries = []SubagentStatus{t.info}
	} else {
		ts := make([]*task, 0, len(m.tasks))
		for _, t := range m.tasks {
			ts = append(ts, t)
		}
		slices.SortFunc(ts, func(a, b *task) int { return a.seq - b.seq })
		for _, t := range ts {
			entries = append(entries, t.info)
		}
	}
	before := len(m.tasks)
	for _, e := range entries {
		if e.Status != "running" {
			delete(m.tasks, e.SubagentID) // a finished result is read once
		}
	}
	if before > 0 && len(m.tasks) == 0 {
		m.syncTools(ctx, false)
	}
	if entries == nil {
		entries = []SubagentStatus{}
	}
	return jsonText(map[string]any{"subagents": entries})
}

// Cancel kills a running local subagent and reports it cancelled. Unknown
// and finished ids are a no-op.
func (m *LocalSubagents) Cancel(ctx context.Context, subagentID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tasks[subagentID]
	if !ok || t.terminal() {
		return nil
	}
	m.cancelLocked(ctx, t, "explicit")
	return nil
}

func (m *LocalSubagents) cancelLocked(ctx context.Context, t *task, reason string) {
	t.info.Status, t.info.Reason = "cancelled", ptr(reason)
	t.cancel()
	m.report(ctx, sdk.LocalSubagentReport{State: sdk.SubagentCancelled, SubagentID: t.info.SubagentID,
		Harness: t.info.Harness, Model: t.info.Model, Reason: reason})
}

// close is the session close hook: cancel what runs, forget everything,
// and wait for the watchers to exit.
func (m *LocalSubagents) close(ctx context.Context, _ *sdk.Session) error {
	m.mu.Lock()
	m.closed = true
	had := len(m.tasks) > 0
	for _, t := range m.tasks {
		if !t.terminal() {
			m.cancelLocked(ctx, t, "session_close")
		}
	}
	clear(m.tasks)
	if had {
		m.syncTools(ctx, false)
	}
	m.mu.Unlock()
	m.wg.Wait()
	return nil
}

// report sends a lifecycle report; like every report it is telemetry and a
// failure is only logged.
func (m *LocalSubagents) report(ctx context.Context, r sdk.LocalSubagentReport) {
	if m.sess == nil {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := m.sess.ReportLocalSubagent(rctx, r); err != nil {
		m.sess.Logger().WarnContext(ctx, "bae: local subagent report failed", "state", r.State, "subagent_id", r.SubagentID, "err", err)
	}
}

// syncTools declares (or withdraws) the status tool: a full replacement
// of this client's tool list. Callers hold m.mu.
func (m *LocalSubagents) syncTools(ctx context.Context, withStatus bool) {
	if m.sess == nil {
		return
	}
	specs := slices.DeleteFunc(m.sess.ClientTools(), func(s sdk.ToolSpec) bool { return s.Name == LocalSubagentStatusName })
	if withStatus {
		specs = append(specs, sdk.ToolSpec{Name: LocalSubagentStatusName, Description: statusDescription, InputSchema: statusSchema()})
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := m.sess.UpdateClientTools(rctx, specs); err != nil {
		m.sess.Logger().WarnContext(ctx, "bae: updating client tools failed", "status_tool", withStatus, "err", err)
	}
}
