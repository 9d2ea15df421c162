package baectl

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
)

// Deployment modes of `baectl setup`.
const (
	modeCompose = "compose" // docker compose: PostgreSQL, Temporal, Temporal UI, baesrv
	modeDev     = "dev"     // one `baesrv dev` process on the local PostgreSQL
)

// Provider kinds setup knows. "fake" is the offline fake provider
// (cmd/fakeprovider), which speaks the Anthropic format.
var setupKinds = []string{"fake", "anthropic", "openai"}

// providerDefaults are the per-kind answers Enter accepts.
var providerDefaults = map[string]struct{ name, model, envVar string }{
	"fake":      {"fake", "fake-model", ""},
	"anthropic": {"anthropic-sonnet", "claude-sonnet-4-6", "ANTHROPIC_API_KEY"},
	"openai":    {"openai-gpt", "gpt-5", "OPENAI_API_KEY"},
}

var (
	nameRe   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)
	envVarRe = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)
)

// setupProvider is one [[providers.entries]] the wizard writes.
type setupProvider struct {
	kind, name, model, envVar string
}

// setupMCP is one [[mcp.servers]] the wizard writes.
type setupMCP struct {
	name, transport, command string
	args                     []string
	url                      string
	headers                  map[string]string
	// secret is the environment variable a header reads (${VAR}),
	// collected like a provider's key.
	secret  string
	bundled bool // examples/mcp-words: its path depends on the mode
}

// mcpPresets are BAE's setup choices for an MCP server; "custom" asks for
// everything.
var mcpPresets = []string{"filesystem", "fetch", "github", "custom"}

// deployment is everything the wizard decided; render turns it into files.
type deployment struct {
	mode       string
	dir        string // absolute
	repo       string // absolute bae-go checkout, "" if none was found
	image      string // compose: image to run instead of building repo
	providers  []setupProvider
	mcp        []setupMCP
	clientPort int
	uiPort     int
	logLevel   string
	public     bool              // compose: publish the client port on every interface
	secrets    map[string]string // env var -> value written to .env
	missing    []string          // secrets left for the operator to supply
	pgPassword string
	// consolePassword (dev mode) unlocks the operator console; setup prints
	// it once and keeps it in .env.
	consolePassword string
}

// consolePort is where the dev mode's console listens (loopback).
const consolePort = 8082

type setupFlags struct {
	dir, mode, repo, image               string
	kind, providerName, model, apiKeyEnv string
	words                                bool
	mcpPresets                           []string
	clientPort, uiPort                   int
	logLevel                             string
	public, yes, force, launch, noLaunch bool
}

func setupCmd(fs *pflag.FlagSet) runFunc {
	var f setupFlags
	fs.StringVar(&f.dir, "dir", ".", "`DIR` to write the deployment into (created if missing)")
	fs.StringVar(&f.mode, "mode", modeCompose, "`MODE`: compose (PostgreSQL, Temporal and baesrv in docker compose) or dev (one baesrv dev process)")
	fs.StringVar(&f.repo, "repo", "", "bae-go checkout `DIR` to build from (default: found from the working directory up)")
	fs.StringVar(&f.image, "image", "", "compose: run this baesrv `IMAGE` instead of building the checkout")
	fs.StringVar(&f.kind, "provider", "fake", "first provider's `KIND`: fake (offline), anthropic or openai")
	fs.StringVar(&f.providerName, "provider-name", "", "registry `NAME` of the first provider (default: by kind, e.g. anthropic-sonnet)")
	fs.StringVar(&f.model, "model", "", "`MODEL` of the first provider (default: by kind)")
	fs.StringVar(&f.apiKeyEnv, "api-key-env", "", "`VAR` holding the first provider's API key (default: ANTHROPIC_API_KEY or OPENAI_API_KEY)")
	fs.BoolVar(&f.words, "mcp-words", true, "register the bundled example MCP server \"words\" (examples/mcp-words)")
	fs.StringArrayVar(&f.mcpPresets, "mcp-preset", nil, "add an MCP server from a `PRESET` with its defaults, repeatable: filesystem (npx, /data), fetch (uvx) or github (hosted, token in GITHUB_TOKEN)")
	fs.IntVar(&f.clientPort, "client-port", 8080, "host `PORT` of the client API")
	fs.IntVar(&f.uiPort, "ui-port", 8233, "host `PORT` of the Temporal Web UI")
	fs.StringVar(&f.logLevel, "log-level", "info", "baesrv `LEVEL`: debug, info, warn or error")
	fs.BoolVar(&f.public, "public", false, "compose: publish the client API on every interface, not only 127.0.0.1")
	fs.BoolVarP(&f.yes, "yes", "y", false, "ask nothing: take the flags and the defaults")
	fs.BoolVar(&f.force, "force", false, "overwrite an existing deployment in --dir (the old files are kept as .bak)")
	fs.BoolVar(&f.launch, "launch", false, "start the deployment when the files are written")
	return func(ctx context.Context, e *invocation, _ []string) error {
		p := &prompter{in: bufio.NewReader(e.stdin), out: e.stdout, quiet: f.yes, echo: !isTerminal(e.stdin)}
		d, err := f.decide(fs, p, e.env)
		if err != nil {
			return err
		}
		files, err := d.render()
		if err != nil {
			return err
		}
		if err := writeDeployment(d, files, f.force || (!f.yes && p.yesNo(
			"Files of a deployment already exist in "+d.dir+". Overwrite them (the old ones are kept as .bak)?", false, existing(d, files)))); err != nil {
			return err
		}
		printSetupSummary(e, d, files)
		launch := f.launch
		if !fs.Changed("launch") {
			launch = p.yesNo("Launch it now?", false, true)
		}
		if launch {
			return launchDeployment(ctx, e, d)
		}
		return nil
	}
}

// decide answers every question, from a flag when it was given, else from
// the operator (Enter takes the default), else from the default.
func (f *setupFlags) decide(fs *pflag.FlagSet, p *prompter, env LookupEnv) (*deployment, error) {
	d := &deployment{secrets: map[string]string{}}
	var err error
	if d.dir, err = filepath.Abs(f.dir); err != nil {
		return nil, fmt.Errorf("--dir %s: %w", f.dir, err)
	}
	fmt.Fprintln(p.out, "bae-go setup: a deployment in "+d.dir+" (press Enter to take each [default])")

	d.mode = f.mode
	if !fs.Changed("mode") {
		d.mode = p.choose("Deployment: docker compose (PostgreSQL, Temporal, baesrv) or dev (one local baesrv dev process)?",
			[]string{modeCompose, modeDev}, modeCompose)
	} else if d.mode != modeCompose && d.mode != modeDev {
		return nil, usagef("--mode must be compose or dev (got %q)", d.mode)
	}
	d.repo = f.repo
	if d.repo == "" {
		d.repo = findRepo()
	}
	if d.repo != "" {
		if d.repo, err = filepath.Abs(d.repo); err != nil {
			return nil, fmt.Errorf("--repo: %w", err)
		}
	}
	d.image = f.image
	if d.mode == modeDev && d.repo == "" {
		return nil, errors.New("dev mode runs this checkout's bin/baesrv: run setup from inside the bae-go repository, or pass --repo")
	}
	if d.mode == modeCompose && d.repo == "" && d.image == "" {
		d.image = "bae-go:local"
	}

	first, err := f.firstProvider(fs, p)
	if err != nil {
		return nil, err
	}
	d.providers = append(d.providers, first)
	for p.yesNo("Add another provider (a fallback)?", false, true) {
		d.providers = append(d.providers, p.provider(d.providers, "anthropic"))
	}
	for _, pr := range d.providers {
		d.collectSecret(pr.envVar, p, env)
	}

	words := f.words
	if !fs.Changed("mcp-words") {
		words = p.yesNo("Register the bundled example MCP server \"words\" (count_words, reverse_text)?", true, true)
	}
	if words {
		d.mcp = append(d.mcp, setupMCP{name: exampleMCPServer, transport: "stdio", bundled: true})
	}
	for _, name := range f.mcpPresets {
		m, ok := presetMCP(name, d.mcp)
		if !ok {
			return nil, usagef("--mcp-preset must be one of filesystem, fetch, github (got %q)", name)
		}
		d.mcp = append(d.mcp, m)
		d.collectSecret(m.secret, p, env)
	}
	for p.yesNo("Add another MCP server?", false, true) {
		m := p.mcpServer(d.mcp)
		d.mcp = append(d.mcp, m)
		d.collectSecret(m.secret, p, env)
	}

	d.clientPort = f.clientPort
	if !fs.Changed("client-port") {
		d.clientPort = p.port("Client API port on this host?", f.clientPort)
	} else if !validPort(d.clientPort) {
		return nil, usagef("--client-port must be 1-65535 (got %d)", d.clientPort)
	}
	d.uiPort = f.uiPort
	if !fs.Changed("ui-port") {
		d.uiPort = p.port("Temporal Web UI port on this host?", f.uiPort)
	} else if !validPort(d.uiPort) {
		return nil, usagef("--ui-port must be 1-65535 (got %d)", d.uiPort)
	}
	if d.clientPort == d.uiPort {
		return nil, usagef("the client API and the Temporal UI cannot share port %d", d.clientPort)
	}
	levels := []string{"debug", "info", "warn", "error"}
	d.logLevel = f.logLevel
	if !fs.Changed("log-level") {
		d.logLevel = p.choose("baesrv log level?", levels, f.logLevel)
	} else if !slices.Contains(levels, d.logLevel) {
		return nil, usagef("--log-level must be one of %s (got %q)", strings.Join(levels, ", "), d.logLevel)
	}
	d.public = f.public
	if d.mode == modeDev {
		pw := make([]byte, 16)
		if _, err := rand.Read(pw); err != nil {
			return nil, fmt.Errorf("generate the console password: %w", err)
		}
		d.consolePassword = hex.EncodeToString(pw)
	}
	if d.mode == modeCompose {
		pw := make([]byte, 16)
		if _, err := rand.Read(pw); err != nil {
			return nil, fmt.Errorf("generate the PostgreSQL password: %w", err)
		}
		d.pgPassword = hex.EncodeToString(pw)
	}
	return d, nil
}

func (f *setupFlags) firstProvider(fs *pflag.FlagSet, p *prompter) (setupProvider, error) {
	if !fs.Changed("provider") && !fs.Changed("provider-name") && !fs.Changed("model") && !fs.Changed("api-key-env") {
		return p.provider(nil, f.kind), nil
	}
	if !slices.Contains(setupKinds, f.kind) {
		return setupProvider{}, usagef("--provider must be one of %s (got %q)", strings.Join(setupKinds, ", "), f.kind)
	}
	def := providerDefaults[f.kind]
	pr := setupProvider{kind: f.kind, name: orDefault(f.providerName, def.name), model: orDefault(f.model, def.model), envVar: orDefault(f.apiKeyEnv, def.envVar)}
	if f.kind == "fake" {
		pr.envVar = ""
	}
	if !nameRe.MatchString(pr.name) {
		return setupProvider{}, usagef("--provider-name %q: use letters, digits, '.', '_' and '-'", pr.name)
	}
	if pr.envVar != "" && !envVarRe.MatchString(pr.envVar) {
		return setupProvider{}, usagef("--api-key-env %q is not an environment variable name (A-Z, 0-9, _)", pr.envVar)
	}
	return pr, nil
}

// collectSecret decides where a provider's key comes from: the environment
// setup runs in (copied into .env), a typed value, or nowhere yet (listed
// as missing, and compose refuses to start without it).
func (d *deployment) collectSecret(name string, p *prompter, env LookupEnv) {
	if name == "" {
		return
	}
	if _, done := d.secrets[name]; done || slices.Contains(d.missing, name) {
		return
	}
	if v := env.get(name); v != "" {
		if p.yesNo(fmt.Sprintf("%s is set in this shell. Write it into .env?", name), true, true) {
			d.secrets[name] = v
			return
		}
	} else if v := p.ask(fmt.Sprintf("Value of %s (typed text is shown; blank: supply it later in .env or the environment)?", name), ""); v != "" {
		d.secrets[name] = v
		return
	}
	d.missing = append(d.missing, name)
}

func orDefault(v, def string) string {
	if strings.TrimSpace(v) == "" {
		return def
	}
	return strings.TrimSpace(v)
}

func validPort(n int) bool { return n > 0 && n <= 65535 }

// findRepo walks up from the working directory to this module's go.mod.
func findRepo() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/bae-go/bae-go\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// prompter asks one question at a time on out and reads answers from in.
// quiet (--yes) or the end of input makes every question take its default.
type prompter struct {
	in    *bufio.Reader
	out   io.Writer
	quiet bool
	eof   bool
	echo  bool // input is not a terminal: show each answer, so the dialogue reads as one
}

func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// ask prints q with its default and returns the answer, or def for Enter.
func (p *prompter) ask(q, def string) string {
	if p.quiet || p.eof {
		return def
	}
	if def != "" {
		fmt.Fprintf(p.out, "%s [%s] ", q, def)
	} else {
		fmt.Fprintf(p.out, "%s ", q)
	}
	line, err := p.in.ReadString('\n')
	if err != nil {
		p.eof = true
	}
	if p.echo || p.eof {
		fmt.Fprintln(p.out, strings.TrimSpace(line))
	}
	if v := strings.TrimSpace(line); v != "" {
		return v
	}
	return def
}

// choose asks until the answer is one of options.
func (p *prompter) choose(q string, options []string, def string) string {
	for {
		v := strings.ToLower(p.ask(fmt.Sprintf("%s (%s)", q, strings.Join(options, "/")), def))
		if slices.Contains(options, v) {
			return v
		}
		fmt.Fprintf(p.out, "  please answer one of: %s\n", strings.Join(options, ", "))
	}
}

// yesNo asks a y/n question; when asked is false the question does not
// apply and def is returned without prompting.
func (p *prompter) yesNo(q string, def, asked bool) bool {
	if !asked {
		return false
	}
	d := "y/N"
	if def {
		d = "Y/n"
	}
	for {
		switch strings.ToLower(p.ask(q, d)) {
		case "y", "yes":
			return true
		case "n", "no":
			return false
		case strings.ToLower(d):
			return def
		}
		fmt.Fprintln(p.out, "  please answer y or n")
	}
}

func (p *prompter) port(q string, def int) int {
	for {
		v := p.ask(q, strconv.Itoa(def))
		if n, err := strconv.Atoi(v); err == nil && validPort(n) {
			return n
		}
		fmt.Fprintln(p.out, "  please answer a port number from 1 to 65535")
	}
}

// name asks for a registry name not in taken. With no one to answer, a
// default that is taken becomes unique instead.
func (p *prompter) name(q, def string, taken []string) string {
	for {
		v := p.ask(q, def)
		switch {
		case p.quiet || p.eof:
			if !nameRe.MatchString(v) {
				v = "server"
			}
			if slices.Contains(taken, v) {
				v = uniqueName(v, taken)
			}
			return v
		case !nameRe.MatchString(v):
			fmt.Fprintln(p.out, "  use letters, digits, '.', '_' and '-'")
		case slices.Contains(taken, v):
			fmt.Fprintf(p.out, "  %q is already used\n", v)
		default:
			return v
		}
	}
}

// freeName is base, or base with a suffix when base is taken.
func freeName(base string, taken []string) string {
	if !slices.Contains(taken, base) {
		return base
	}
	return uniqueName(base, taken)
}

func uniqueName(base string, taken []string) string {
	for i := 2; ; i++ {
		if n := fmt.Sprintf("%s-%d", base, i); !slices.Contains(taken, n) {
			return n
		}
	}
}

func (p *prompter) provider(have []setupProvider, defKind string) setupProvider {
	taken := make([]string, len(have))
	for i, h := range have {
		taken[i] = h.name
	}
	kind := p.choose("Provider kind?", setupKinds, defKind)
	def := providerDefaults[kind]
	defName := def.name
	if slices.Contains(taken, defName) {
		defName = uniqueName(defName, taken)
	}
	pr := setupProvider{kind: kind, name: p.name("Provider name (profiles refer to it)?", defName, taken)}
	pr.model = p.ask("Model?", def.model)
	if kind != "fake" {
		for {
			pr.envVar = p.ask("Environment variable holding its API key?", def.envVar)
			if envVarRe.MatchString(pr.envVar) {
				break
			}
			fmt.Fprintln(p.out, "  use A-Z, 0-9 and _")
		}
	}
	return pr
}

// presetMCP is a preset with its defaults, named apart from have.
func presetMCP(preset string, have []setupMCP) (setupMCP, bool) {
	taken := make([]string, len(have))
	for i, h := range have {
		taken[i] = h.name
	}
	name := freeName(preset, taken)
	switch preset {
	case "filesystem":
		return setupMCP{name: name, transport: "stdio", command: "npx", args: []string{"-y", "@modelcontextprotocol/server-filesystem", "/data"}}, true
	case "fetch":
		return setupMCP{name: name, transport: "stdio", command: "uvx", args: []string{"mcp-server-fetch"}}, true
	case "github":
		return setupMCP{name: name, transport: "http", url: "https://api.githubcopilot.com/mcp/", secret: "GITHUB_TOKEN",
			headers: map[string]string{"Authorization": "Bearer ${GITHUB_TOKEN}"}}, true
	}
	return setupMCP{}, false
}

func (p *prompter) mcpServer(have []setupMCP) setupMCP {
	taken := make([]string, len(have))
	for i, h := range have {
		taken[i] = h.name
	}
	switch preset := p.choose("Which MCP server: filesystem (npx), fetch (uvx), github (GitHub's hosted server, token in GITHUB_TOKEN) or custom?", mcpPresets, "custom"); preset {
	case "filesystem":
		m := setupMCP{name: p.name("MCP server name?", freeName("filesystem", taken), taken), transport: "stdio", command: "npx"}
		m.args = []string{"-y", "@modelcontextprotocol/server-filesystem", p.ask("Directory it may read and write (on baesrv's host or container)?", "/data")}
		return m
	case "fetch":
		return setupMCP{name: p.name("MCP server name?", freeName("fetch", taken), taken), transport: "stdio", command: "uvx", args: []string{"mcp-server-fetch"}}
	case "github":
		m := setupMCP{name: p.name("MCP server name?", freeName("github", taken), taken), transport: "http", url: "https://api.githubcopilot.com/mcp/"}
		for {
			m.secret = p.ask("Environment variable holding the GitHub token?", "GITHUB_TOKEN")
			if envVarRe.MatchString(m.secret) {
				break
			}
			fmt.Fprintln(p.out, "  use A-Z, 0-9 and _")
		}
		m.headers = map[string]string{"Authorization": "Bearer ${" + m.secret + "}"}
		return m
	}
	m := setupMCP{name: p.name("MCP server name?", "", taken)}
	m.transport = p.choose("Transport?", []string{"stdio", "http", "sse"}, "stdio")
	if m.transport == "stdio" {
		for m.command == "" {
			m.command = p.ask("Command (looked up in baesrv's PATH)?", "")
			if p.quiet || p.eof {
				m.command = "true"
			}
		}
		m.args = strings.Fields(p.ask("Arguments (space-separated)?", ""))
		return m
	}
	for !strings.HasPrefix(m.url, "http://") && !strings.HasPrefix(m.url, "https://") {
		m.url = p.ask("URL (http:// or https://)?", "")
		if p.quiet || p.eof {
			m.url = "http://127.0.0.1:1/mcp"
		}
	}
	return m
}

// existing reports whether --dir already holds any file setup would write.
func existing(d *deployment, files []setupFile) bool {
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(d.dir, f.name)); err == nil {
			return true
		}
	}
	return false
}

// writeDeployment writes the files, refusing to replace an existing
// deployment unless overwrite; replaced files are kept as <name>.bak.
func writeDeployment(d *deployment, files []setupFile, overwrite bool) error {
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", d.dir, err)
	}
	if existing(d, files) && !overwrite {
		return fmt.Errorf("%s already holds a deployment; rerun with --force to replace it (the old files are kept as .bak)", d.dir)
	}
	for _, f := range files {
		path := filepath.Join(d.dir, f.name)
		if _, err := os.Stat(path); err == nil {
			if err := os.Rename(path, path+".bak"); err != nil {
				return fmt.Errorf("back up %s: %w", path, err)
			}
		}
		if err := os.WriteFile(path, []byte(f.content), f.mode); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		// WriteFile's mode is masked by the umask; .env must be 0600.
		if err := os.Chmod(path, f.mode); err != nil {
			return fmt.Errorf("chmod %s: %w", path, err)
		}
	}
	return nil
}

func printSetupSummary(e *invocation, d *deployment, files []setupFile) {
	w := e.stdout
	fmt.Fprintf(w, "\nWrote %s:\n", d.dir)
	for _, f := range files {
		fmt.Fprintf(w, "  %-20s %s\n", f.name, f.about)
	}
	if len(d.missing) > 0 {
		fmt.Fprintf(w, "\nStill needed: %s. Add it to %s (or export it) before starting.\n",
			strings.Join(d.missing, ", "), filepath.Join(d.dir, ".env"))
	}
	fmt.Fprintln(w, "\nStart it:")
	switch d.mode {
	case modeCompose:
		fmt.Fprintf(w, "  cd %s && docker compose up -d --build\n", shellQuote(d.dir))
		fmt.Fprintf(w, "Then create a profile and a client key (the admin port stays inside the container):\n")
		fmt.Fprintf(w, "  docker compose exec baesrv baectl quickstart --provider %s\n", d.providers[0].name)
		fmt.Fprintf(w, "Client API http://127.0.0.1:%d, Temporal UI http://127.0.0.1:%d\n", d.clientPort, d.uiPort)
	case modeDev:
		fmt.Fprintf(w, "  %s\n", shellQuote(filepath.Join(d.dir, devScript)))
		fmt.Fprintf(w, "Then, in another shell:\n")
		fmt.Fprintf(w, "  BAE_DATA_DIR=%s %s quickstart --provider %s --client-url http://127.0.0.1:%d\n",
			shellQuote(filepath.Join(d.dir, "bae-data")), shellQuote(filepath.Join(d.repo, "bin", "baectl")), d.providers[0].name, d.clientPort)
		fmt.Fprintf(w, "Operator console http://127.0.0.1:%d, password %s\n(shown once here; it is BAE_CONSOLE_PASSWORD in %s)\n",
			consolePort, d.consolePassword, filepath.Join(d.dir, ".env"))
	}
}

// launchTimeout bounds the wait for a launched server to become ready.
const launchTimeout = 5 * time.Minute

// launchDeployment starts the deployment, waits until its client port's
// /readyz answers 200, and creates the "default" profile (on the first
// provider) with a client key, as BAE's setup does; the key is printed
// once. compose runs in the background; dev mode's server runs in the
// foreground, so setup waits for it to end.
func launchDeployment(ctx context.Context, e *invocation, d *deployment) error {
	// The launched processes write while setup does: one lock for each
	// stream (a terminal is a file and needs none, a buffer does).
	locked := *e
	locked.stdout, locked.stderr = &syncWriter{w: e.stdout}, &syncWriter{w: e.stderr}
	e = &locked
	var cmd *exec.Cmd
	switch d.mode {
	case modeCompose:
		if _, err := exec.LookPath("docker"); err != nil {
			return errors.New("docker not found on PATH: install Docker, then run `docker compose up -d --build` in " + d.dir)
		}
		cmd = exec.CommandContext(ctx, "docker", "compose", "up", "-d", "--build")
	default:
		cmd = exec.CommandContext(ctx, filepath.Join(d.dir, devScript))
	}
	cmd.Dir = d.dir
	cmd.Stdout, cmd.Stderr = e.stdout, e.stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("launch %s: %w", strings.Join(cmd.Args, " "), err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if d.mode == modeCompose {
		if err := <-exited; err != nil {
			return fmt.Errorf("launch %s: %w", strings.Join(cmd.Args, " "), err)
		}
		exited = nil
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", d.clientPort)
	fmt.Fprintf(e.stdout, "Waiting for %s …\n", url)
	if err := waitReady(ctx, url, launchTimeout, exited); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, "The server is ready.")
	if err := createDefaultProfile(ctx, e, d); err != nil {
		return err
	}
	if exited != nil {
		if err := <-exited; err != nil && ctx.Err() == nil {
			return fmt.Errorf("%s: %w", strings.Join(cmd.Args, " "), err)
		}
	}
	return nil
}

// syncWriter serializes writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// waitReady polls url until it answers 200, the timeout passes, or the
// launched process ends (exited, nil for a background launch).
func waitReady(ctx context.Context, url string, timeout time.Duration, exited <-chan error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	client := &http.Client{Timeout: 5 * time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the server did not become ready at %s within %s", url, timeout)
		case err := <-exited:
			if err != nil {
				return fmt.Errorf("the server exited before it was ready: %w", err)
			}
			return errors.New("the server exited before it was ready")
		case <-tick.C:
		}
	}
}

// createDefaultProfile runs `baectl quickstart` where the admin port is:
// inside the baesrv container (compose) or next to the dev server, with
// this deployment's data directory.
func createDefaultProfile(ctx context.Context, e *invocation, d *deployment) error {
	args := []string{"quickstart", "--profile-name", "default", "--provider", d.providers[0].name,
		"--client-url", fmt.Sprintf("http://127.0.0.1:%d", d.clientPort)}
	var cmd *exec.Cmd
	if d.mode == modeCompose {
		cmd = exec.CommandContext(ctx, "docker", append([]string{"compose", "exec", "-T", "baesrv", "baectl"}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, filepath.Join(d.repo, "bin", "baectl"), args...)
		cmd.Env = append(os.Environ(), "BAE_DATA_DIR="+filepath.Join(d.dir, "bae-data"))
	}
	cmd.Dir = d.dir
	cmd.Stdout, cmd.Stderr = e.stdout, e.stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("create the default profile and key (%s): %w", strings.Join(cmd.Args, " "), err)
	}
	return nil
}

// shellQuote quotes s for a POSIX shell when it needs quoting.
func shellQuote(s string) string {
	if regexp.MustCompile(`^[A-Za-z0-9_./:=@-]+$`).MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
