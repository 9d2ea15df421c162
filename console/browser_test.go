package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
	"github.com/bae-go/bae-go/internal/testing/testlog"
)

// screenshotDir receives one PNG per page from every run (committed, and
// shown by the README and docs).
var screenshotDir = filepath.Join("..", "docs", "console")

const consolePassword = "browser-test-password"

// chromium finds Debian's chromium (scripts/test-deps.sh installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("BAE_SKIP_BROWSER_TESTS") != "" {
		t.Skip("BAE_SKIP_BROWSER_TESTS is set and no chromium is installed")
	}
	t.Fatal("chromium not found: run scripts/test-deps.sh (Debian package chromium)")
	return ""
}

// consoleEnv is a server with the console on, a fake provider lane and a
// profile.
type consoleEnv struct {
	srv  *testenv.Server
	fake *fakeprovider.Server
	pid  string
	logs *testlog.Buffer
}

func newConsoleEnv(t *testing.T, extraEnv map[string]string) *consoleEnv {
	t.Helper()
	fake := fakeprovider.New(t)
	toml := fmt.Sprintf(`
[[providers.entries]]
name = "primary"
provider = "anthropic"
base_url = %q
model = "claude-fake"
auth_token = "sk-console-test-secret"

[[providers.entries]]
name = "backup"
provider = "openai"
base_url = %q
model = "gpt-fake"
auth_token = "${BAE_CONSOLE_TEST_TOKEN}"

[[mcp.servers]]
name = "docs"
transport = "http"
url = "http://mcp-user:mcp-url-secret@127.0.0.1:1/mcp?api_key=mcp-query-secret"
headers = { Authorization = "Bearer mcp-header-secret" }

[[mcp.servers]]
name = "files"
transport = "stdio"
command = "${BAE_CONSOLE_TEST_BIN}/mcp-files"
args = ["--token", "mcp-arg-secret", "--root=${BAE_CONSOLE_TEST_ARG}", "/data"]
`, strings.Replace(fake.Lane("primary").URL(), "http://", "http://gw-user:base-url-secret@", 1), fake.Lane("backup").URL())
	env := map[string]string{
		"BAE_CONSOLE_ADDR":            "127.0.0.1:0",
		"BAE_CONSOLE_PASSWORD":        consolePassword,
		"BAE_CONSOLE_TEMPORAL_UI_URL": "http://127.0.0.1:8233",
	}
	for k, v := range extraEnv {
		env[k] = v
	}
	logs := &testlog.Buffer{}
	srv := testenv.Start(t, testenv.Options{ConfigTOML: toml, Env: env, LogOutput: logs})
	require.NotEmpty(t, srv.ConsoleURL, "console did not start")
	pid := srv.Profile(t, map[string]any{"name": "support-bot", "primary_provider": "primary", "fallback_providers": []string{"backup"}, "allowed_tools": []string{"get_time"}})
	return &consoleEnv{srv: srv, fake: fake, pid: pid, logs: logs}
}

// openDriver opens a session with a new key, declaring get_time, and
// registers as its driver.
func (e *consoleEnv) openDriver(t *testing.T, version string) (sid, sk string) {
	t.Helper()
	_, key := e.srv.Key(t, e.pid)
	sid, sk = e.srv.Open(t, key, map[string]any{"client_version": version, "tools": []any{
		map[string]any{"name": "get_time", "description": "current time", "input_schema": map[string]any{"type": "object"}},
	}})
	objs := e.srv.Call(t, sid, sk, "session.registerDriver", nil)
	require.Equal(t, map[string]any{"registered": true}, testenv.Terminal(t, objs)["result"])
	return sid, sk
}

func send(id int, content any) map[string]any {
	return map[string]any{"jsonrpc": "2.0", "id": id, "method": "session.sendMessage", "params": map[string]any{"message": map[string]any{"role": "user", "content": content}}}
}

type browser struct {
	t   *testing.T
	ctx context.Context
	url string
}

func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, // chromium refuses to run as root otherwise
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("hide-scrollbars", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	require.NoError(t, chromedp.Do(ctx), "start chromium") // first Run: no timeout, it owns the browser
	b := &browser{t: t, ctx: ctx, url: base}
	// Screenshots without the flash of freshly streamed rows.
	b.do(func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-reduced-motion", Value: "reduce"}},
		})
		return chromedp.Void{}, err
	})
	return b
}

// do runs steps with a bound on how long they may take.
func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 45*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.dumpOnFailure()
		require.NoError(b.t, err)
	}
}

// dumpOnFailure saves what the browser shows, for the failure message.
func (b *browser) dumpOnFailure() {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	page, _ := chromedp.Run(ctx, chromedp.Evaluate[string]("document.body ? document.body.innerText : ''"))
	b.t.Logf("browser at %s showing:\n%s", loc, page)
	if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
		path := filepath.Join(b.t.TempDir(), "failure.png")
		if os.WriteFile(path, png, 0o644) == nil {
			b.t.Logf("screenshot: %s", path)
		}
	}
}

func run[T any](b *browser, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 45*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	require.NoError(b.t, err)
	return v
}

// waitFor polls a JavaScript condition in the page. A poll cut short by a
// navigation (a submitted form) starts again in the new page.
func (b *browser) waitFor(expr string) {
	b.t.Helper()
	deadline := time.Now().Add(40 * time.Second)
	for {
		ctx, cancel := context.WithDeadline(b.ctx, deadline)
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(time.Until(deadline)), chromedp.WithPollingInterval(50*time.Millisecond)))
		cancel()
		if err == nil {
			return
		}
		if time.Now().Before(deadline) && (strings.Contains(err.Error(), "navigated or closed") || strings.Contains(err.Error(), "context")) {
			continue
		}
		require.NoError(b.t, err, "waiting for %s", expr)
	}
}

// text is the innerText of the first node sel matches, once one is
// visible. The node is found and read in one evaluation: a live event
// redraws the transcript (innerHTML), which would detach a node found
// first and read after, and read it as "".
func (b *browser) text(sel string) string {
	b.t.Helper()
	b.do(chromedp.WaitVisible(chromedp.CSS(sel)))
	q, err := json.Marshal(sel)
	require.NoError(b.t, err)
	return run(b, chromedp.Evaluate[string](`(n => n ? n.innerText : "")(document.querySelector(`+string(q)+`))`))
}

// navigateBy runs steps that load a new page (a form's submit, a link)
// and returns once that page has loaded: a condition polled right after
// could still hold on the page being left, and a query then run on the
// half-loaded new one.
func (b *browser) navigateBy(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	run(b, chromedp.Evaluate[bool](`window.__leaving = true`))
	b.do(steps...)
	b.waitFor(`window.__leaving !== true && document.readyState === 'complete'`)
}
func (b *browser) html() string {
	return run(b, chromedp.Evaluate[string]("document.documentElement.outerHTML"))
}
func (b *browser) location() string { return run(b, chromedp.Location()) }

func (b *browser) screenshot(name string) {
	b.t.Helper()
	png := run(b, chromedp.FullScreenshot(100))
	require.NoError(b.t, os.MkdirAll(screenshotDir, 0o755))
	require.NoError(b.t, os.WriteFile(filepath.Join(screenshotDir, name+".png"), png, 0o644))
}

func TestConsoleInBrowser(t *testing.T) {
	start := time.Now()
	e := newConsoleEnv(t, nil)
	b := newBrowser(t, e.srv.ConsoleURL)
	t.Logf("server and chromium up in %s", time.Since(start).Round(time.Millisecond))
	step := time.Now()

	// Login: a page without a login lands on the form, a wrong password is
	// refused, the right one goes back where the operator was headed.
	b.do(chromedp.Navigate(b.url + "/keys"))
	require.Contains(t, b.location(), "/login?next=%2Fkeys")
	b.do(chromedp.WaitVisible(chromedp.CSS("#password")))
	b.screenshot("login")
	b.do(chromedp.SendKeys(chromedp.CSS("#password"), "not the password"), chromedp.Click(chromedp.CSS("#login-submit")))
	b.waitFor(`document.querySelector('.alert.error') && document.querySelector('.alert.error').innerText.includes('Wrong password')`)
	b.do(chromedp.SendKeys(chromedp.CSS("#password"), consolePassword), chromedp.Click(chromedp.CSS("#login-submit")))
	b.do(chromedp.WaitVisible(chromedp.CSS("#key-form")))
	require.True(t, strings.HasSuffix(b.location(), "/keys"), b.location())
	// The login cookie is HttpOnly: page scripts cannot read it.
	assert.NotContains(t, run(b, chromedp.Evaluate[string]("document.cookie")), "bae_console")
	t.Logf("login: %s", time.Since(step).Round(time.Millisecond))
	step = time.Now()

	// A live session appears in the list.
	sid, sk := e.openDriver(t, "console-e2e/1.0")
	b.do(chromedp.Navigate(b.url + "/sessions"))
	b.do(chromedp.WaitVisible(chromedp.CSS(`tr[data-session="` + sid + `"]`)))
	assert.Contains(t, b.text(`tr[data-session="`+sid+`"]`), "open")
	assert.Contains(t, b.text(`tr[data-session="`+sid+`"]`), "support-bot")

	// ...and updates while a turn runs: the provider holds its answer until
	// released, so the page shows the turn in flight, then its tool call,
	// then the result folded into it and the final answer.
	b.do(chromedp.Click(chromedp.CSS(`tr[data-session="` + sid + `"] a`)))
	b.do(chromedp.WaitVisible(chromedp.CSS("#timeline")))
	b.waitFor(`!document.getElementById('live').hidden`)
	lane := e.fake.Lane("primary")
	lane.Enqueue(
		fakeprovider.ToolUse("tu_clock", "get_time", map[string]any{"tz": "UTC"}).WithText("Let me check the clock.").UntilReleased(),
		fakeprovider.Text("It is 12:00 UTC — lunchtime."),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	turn1 := e.srv.RPCStream(t, ctx, sid, sk, send(1, "What time is it?"))
	select {
	case <-e.fake.Started():
	case <-ctx.Done():
		t.Fatal("the provider never got the request")
	}
	b.waitFor(`document.querySelector('#transcript .bubble.user') && document.querySelector('#transcript .bubble.user').innerText.includes('What time is it?')`)
	b.waitFor(`document.querySelector('#timeline li[data-type="provider.request"]') !== null`)
	b.waitFor(`document.querySelector('#transcript .badge.running') !== null`)
	b.screenshot("session-running")
	e.fake.Release()
	for range turn1.Lines() {
	}
	b.waitFor(`document.querySelector('#transcript details.tool .tool-name') && document.querySelector('#transcript details.tool .tool-name').innerText === 'get_time'`)
	b.waitFor(`document.querySelector('#transcript details.tool .badge').innerText === 'waiting'`)
	objs := e.srv.RPC(t, sid, sk, send(2, []any{map[string]any{"type": "tool_result", "tool_use_id": "tu_clock", "content": "12:00"}}))
	require.NotNil(t, testenv.Terminal(t, objs)["result"], "%v", objs)
	b.waitFor(`[...document.querySelectorAll('#transcript .bubble.assistant')].some(n => n.innerText.includes('lunchtime'))`)
	b.waitFor(`document.querySelector('#transcript details.tool .badge').innerText === 'done'`)
	b.do(chromedp.Click(chromedp.CSS("#transcript details.tool summary")))
	assert.Contains(t, b.text("#transcript details.tool .tool-body"), "12:00", "the client's result is folded into its call")
	assert.Equal(t, 2, run(b, chromedp.Evaluate[int](`document.querySelectorAll('#transcript article.turn').length`)))
	b.screenshot("session")
	t.Logf("live session: %s", time.Since(step).Round(time.Millisecond))

	// Each turn links to its update in the Temporal UI: the console resolves
	// the turn to the history event that accepted it.
	href := run(b, chromedp.Evaluate[string](`document.querySelector('#transcript article.turn a.temporal').getAttribute('href')`))
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequest(http.MethodGet, b.url+href, nil)
	require.NoError(t, err)
	c := b.cookie()
	assert.True(t, c.HTTPOnly)
	assert.Equal(t, network.CookieSameSiteStrict, c.SameSite)
	req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
	resp, err := noFollow.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusFound, resp.StatusCode)
	assert.Regexp(t, `^http://127\.0\.0\.1:8233/namespaces/default/workflows/`+sid+`/[0-9a-f-]+/history/events/[0-9]+$`, resp.Header.Get("Location"))
	step = time.Now()

	// A failed turn is highlighted: every provider fails, the session ends
	// in error and the stream says so.
	sid2, sk2 := e.openDriver(t, "console-e2e/2.0")
	b.do(chromedp.Navigate(b.url + "/sessions/" + sid2))
	b.waitFor(`!document.getElementById('live').hidden`)
	lane.Enqueue(fakeprovider.Error(500, "primary is down"))
	e.fake.Lane("backup").Enqueue(fakeprovider.Error(503, "backup is down too"))
	e.srv.RPC(t, sid2, sk2, send(1, "Are you there?"))
	b.waitFor(`document.querySelector('#transcript article.turn.failed .alert.error') !== null`)
	b.waitFor(`document.querySelector('.session-head [data-state]').innerText === 'error'`)
	b.waitFor(`document.getElementById('live').hidden`)
	assert.Contains(t, b.text("#transcript article.turn.failed"), "all_providers_failed")
	b.screenshot("session-failed")
	t.Logf("failed session: %s", time.Since(step).Round(time.Millisecond))
	step = time.Now()

	// Filters: state and id search.
	b.do(chromedp.Navigate(b.url + "/sessions?state=error"))
	b.do(chromedp.WaitVisible(chromedp.CSS(`tr[data-session="` + sid2 + `"]`)))
	assert.NotContains(t, b.text("#sessions-table"), sid)
	b.do(chromedp.Navigate(b.url + "/sessions?q=" + sid[:20]))
	b.do(chromedp.WaitVisible(chromedp.CSS(`tr[data-session="` + sid + `"]`)))
	b.do(chromedp.Navigate(b.url + "/sessions"))
	b.do(chromedp.WaitVisible(chromedp.CSS("#sessions-table")))
	b.screenshot("sessions")

	// Keys: create one and see its secret once, then revoke it.
	b.do(chromedp.Navigate(b.url+"/keys"),
		chromedp.WaitVisible(chromedp.CSS("#key-form")),
		chromedp.SendKeys(chromedp.CSS("#key-name"), "ops-laptop"),
		chromedp.SetValue(chromedp.CSS("#key-profile"), e.pid),
		chromedp.Click(chromedp.CSS("#key-create")),
		chromedp.WaitVisible(chromedp.CSS("#created-key")),
	)
	secret := b.text("#new-key-secret")
	require.True(t, strings.HasPrefix(secret, "bae_"), secret)
	r := e.srv.Client(t, http.MethodPost, "/api/v1/sessions", secret, map[string]any{"client_version": "made-in-console"})
	require.Equal(t, http.StatusCreated, r.Status, "the key shown works: %s", r.Raw)
	b.screenshot("keys-created")
	keyID := run(b, chromedp.Evaluate[string](`[...document.querySelectorAll('#keys-table tr[data-key]')].find(tr => tr.innerText.includes('ops-laptop')).getAttribute('data-key')`))
	b.do(chromedp.Navigate(b.url + "/keys"))
	b.do(chromedp.WaitVisible(chromedp.CSS("#keys-table")))
	assert.NotContains(t, b.html(), secret, "the key is never shown again")
	b.do(
		chromedp.Click(chromedp.CSS(`tr[data-key="`+keyID+`"] details summary`)),
		chromedp.Click(chromedp.CSS(`button[data-revoke="`+keyID+`"]`)),
		chromedp.WaitVisible(chromedp.CSS("#revoked")),
	)
	assert.Empty(t, run(b, chromedp.Evaluate[int](`document.querySelectorAll('#keys-table tr[data-key="`+keyID+`"]').length`)))
	r = e.srv.Client(t, http.MethodPost, "/api/v1/sessions", secret, map[string]any{})
	assert.Equal(t, http.StatusUnauthorized, r.Status, "a revoked key no longer authenticates")
	b.screenshot("keys")
	t.Logf("keys: %s", time.Since(step).Round(time.Millisecond))
	step = time.Now()

	// Profiles: pickers come from the registries; deleting a profile with
	// keys explains profile_in_use.
	b.do(chromedp.Navigate(b.url + "/profiles/new"))
	b.do(chromedp.WaitVisible(chromedp.CSS("#profile-form")))
	opts := run(b, chromedp.Evaluate[[]string](`[...document.querySelectorAll('select[name=primary_provider] option')].map(o => o.value).filter(Boolean)`))
	assert.Equal(t, []string{"backup", "primary"}, opts)
	b.do(
		chromedp.SendKeys(chromedp.CSS(`input[name=name]`), "triage"),
		chromedp.SetValue(chromedp.CSS(`select[name=primary_provider]`), "backup"),
		chromedp.Click(chromedp.CSS(`input[name=mcp][value=docs]`)),
		chromedp.SendKeys(chromedp.CSS(`textarea[name=allowed_tools]`), "search, open_ticket"),
	)
	b.screenshot("profile-new")
	b.do(chromedp.Click(chromedp.CSS("#profile-save")), chromedp.WaitVisible(chromedp.CSS("#profiles-table")))
	assert.Contains(t, b.text("#profiles-table"), "triage")
	assert.Contains(t, b.text("#profiles-table"), "open_ticket")
	b.screenshot("profiles")
	b.do(chromedp.Navigate(b.url+"/profiles/"+e.pid),
		chromedp.Click(chromedp.CSS(".danger-zone summary")),
		chromedp.Click(chromedp.CSS("#profile-delete")),
		chromedp.WaitVisible(chromedp.CSS("#in-use")),
	)
	assert.Contains(t, b.text("#in-use"), "profile_in_use")
	b.screenshot("profile-in-use")
	t.Logf("profiles: %s", time.Since(step).Round(time.Millisecond))

	// Config: redacted exactly as the admin API redacts it.
	b.do(chromedp.Navigate(b.url+"/config"), chromedp.WaitVisible(chromedp.CSS("#providers-table")))
	page := b.html()
	for _, secretValue := range []string{"sk-console-test-secret", "mcp-header-secret", e.srv.AdminKey} {
		assert.NotContains(t, page, secretValue)
	}
	assert.Contains(t, page, "••••••••")
	b.screenshot("config")

	// Usage: today's bar drawn, a session budget set through the form.
	b.do(chromedp.Navigate(b.url+"/usage?days=7"), chromedp.WaitVisible(chromedp.CSS("#usage-chart")))
	assert.Positive(t, run(b, chromedp.Evaluate[int](`document.querySelectorAll('#usage-chart rect').length`)), "today's tokens are drawn")
	b.do(chromedp.SetValue(chromedp.CSS("#budget-scope"), "session"),
		chromedp.SendKeys(chromedp.CSS("#budget-subject"), sid),
		chromedp.SendKeys(chromedp.CSS("#budget-limit"), "1000000"),
		chromedp.Click(chromedp.CSS("#budget-set")))
	b.waitFor(`document.querySelector('#budgets-table tr[data-budget="session/` + sid + `"]') !== null`)
	b.screenshot("usage")

	// A phone-sized screen gets the same pages without sideways scrolling.
	b.do(chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)),
		chromedp.Navigate(b.url+"/sessions/"+sid), chromedp.WaitVisible(chromedp.CSS("#transcript")))
	assert.LessOrEqual(t, run(b, chromedp.Evaluate[int](`document.documentElement.scrollWidth`)), 390)
	b.screenshot("session-phone")

	// Logging out ends the login.
	b.do(chromedp.EmulateViewport(1280, 900), chromedp.Navigate(b.url+"/sessions"), chromedp.Click(chromedp.CSS(".logout button")))
	b.do(chromedp.WaitVisible(chromedp.CSS("#password")))
	t.Logf("whole browser test: %s", time.Since(start).Round(time.Millisecond))
}

// cookie returns the browser's console login cookie.
func (b *browser) cookie() *network.Cookie {
	b.t.Helper()
	cookies := run(b, chromedp.Action[[]*network.Cookie](func(ctx context.Context, t *chromedp.Target) ([]*network.Cookie, error) {
		res, err := cdp.Call(ctx, t, network.GetCookies, network.GetCookiesParams{URLs: []string{b.url}})
		return res.Cookies, err
	}))
	for _, c := range cookies {
		if strings.HasSuffix(c.Name, "bae_console") {
			return c
		}
	}
	require.FailNow(b.t, "no console cookie in the browser")
	return nil
}

// login signs the browser in through the form.
func (b *browser) login() {
	b.t.Helper()
	b.do(chromedp.Navigate(b.url+"/login"), chromedp.WaitVisible(chromedp.CSS("#password")),
		chromedp.SendKeys(chromedp.CSS("#password"), consolePassword), chromedp.Click(chromedp.CSS("#login-submit")))
	b.do(chromedp.WaitVisible(chromedp.CSS("#sessions-table")))
}

// A driver's message with bare carriage returns must not become events of
// the console's live stream: here it tries to inject a "logout" event that
// sends the operator to a look-alike login page.
func TestConsoleStreamInjection(t *testing.T) {
	var visits atomic.Int32
	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		visits.Add(1)
		_, _ = io.WriteString(w, "<title>phished</title>enter your console password")
	}))
	t.Cleanup(attacker.Close)

	e := newConsoleEnv(t, nil)
	b := newBrowser(t, e.srv.ConsoleURL)
	b.login()
	sid, sk := e.openDriver(t, "injection/1.0")
	b.do(chromedp.Navigate(b.url + "/sessions/" + sid))
	b.waitFor(`!document.getElementById('live').hidden`)

	lane := e.fake.Lane("primary")
	lane.Enqueue(fakeprovider.Text("first answer"), fakeprovider.Text("second answer"))
	payload := "hello\r\revent: logout\rdata: " + attacker.URL + "/login\r\r"
	objs := e.srv.RPC(t, sid, sk, send(1, payload))
	require.NotNil(t, testenv.Terminal(t, objs)["result"], "%v", objs)
	b.waitFor(`[...document.querySelectorAll('#transcript .bubble.assistant')].some(n => n.innerText.includes('first answer'))`)
	// A second turn: the stream went on past the message, so an injected
	// event would have been dispatched by now.
	objs = e.srv.RPC(t, sid, sk, send(2, "still there?"))
	require.NotNil(t, testenv.Terminal(t, objs)["result"], "%v", objs)
	b.waitFor(`[...document.querySelectorAll('#transcript .bubble.assistant')].some(n => n.innerText.includes('second answer'))`)

	assert.Equal(t, b.url+"/sessions/"+sid, b.location(), "the operator stays on the session")
	assert.Zero(t, visits.Load(), "the browser never went to the attacker's page")
	assert.False(t, run(b, chromedp.Evaluate[bool](`document.getElementById('live').hidden`)), "the live stream is still open")
	// The message is shown as text, carriage returns and all.
	assert.Contains(t, b.text("#transcript .bubble.user"), "event: logout")
}
