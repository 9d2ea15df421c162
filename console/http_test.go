package console_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/console"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// client is a browser-like HTTP client: a cookie jar, no redirect following.
type client struct {
	t    *testing.T
	base string
	hc   *http.Client
}

func newClient(t *testing.T, base string) *client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &client{t: t, base: base, hc: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (c *client) get(path string) (*http.Response, string) {
	c.t.Helper()
	resp, err := c.hc.Get(c.base + path)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return resp, string(b)
}

func (c *client) post(path string, form url.Values, header http.Header) (*http.Response, string) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(form.Encode()))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.hc.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return resp, string(b)
}

func (c *client) login() {
	c.t.Helper()
	resp, body := c.post("/login", url.Values{"password": {consolePassword}, "next": {"/keys"}}, nil)
	require.Equal(c.t, http.StatusSeeOther, resp.StatusCode, body)
	require.Equal(c.t, "/keys", resp.Header.Get("Location"))
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (c *client) csrf() string {
	c.t.Helper()
	_, body := c.get("/keys")
	m := csrfField.FindStringSubmatch(body)
	require.NotNil(c.t, m, "no CSRF token on the keys page")
	return m[1]
}

// TestConsoleSecurity covers the login, the signed cookie, CSRF and
// cross-origin refusal, the one-time key display, login expiry ending a live
// stream, and login rate limiting, over plain HTTP.
func TestConsoleSecurity(t *testing.T) {
	e := newConsoleEnv(t, map[string]string{"BAE_CONSOLE_SESSION_TTL": "3s"})
	c := newClient(t, e.srv.ConsoleURL)

	resp, _ := c.get("/sessions?state=open")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	assert.Equal(t, "/login?next=%2Fsessions%3Fstate%3Dopen", resp.Header.Get("Location"))
	resp, _ = c.post("/keys", url.Values{"name": {"x"}, "profile_id": {e.pid}}, nil)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a write without a login")
	stop := "/sessions/ses_" + strings.Repeat("0", 32) + "/turns/trn_" + strings.Repeat("0", 32) + "/stop"
	resp, _ = c.post(stop, url.Values{}, nil)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a Stop without a login")
	resp, _ = c.get("/sessions/ses_" + strings.Repeat("0", 32) + "/events?from=1&through=2")
	assert.Equal(t, http.StatusSeeOther, resp.StatusCode, "a compaction's original events without a login")

	resp, body := c.post("/login", url.Values{"password": {"wrong"}}, nil)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Contains(t, body, "Wrong password")
	assert.Empty(t, resp.Cookies())
	resp, _ = c.post("/login", url.Values{"password": {consolePassword}, "next": {"//evil.example/x"}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	assert.Equal(t, "/sessions", resp.Header.Get("Location"), "no open redirect off the console")
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "bae_console" {
			cookie = ck
		}
	}
	require.NotNil(t, cookie)
	assert.True(t, cookie.HttpOnly)
	assert.Equal(t, http.SameSiteStrictMode, cookie.SameSite)
	assert.Equal(t, "/", cookie.Path)
	assert.False(t, cookie.Secure, "plain HTTP on loopback")
	assert.Equal(t, 3, cookie.MaxAge)

	// A forged cookie is refused.
	forged := newClient(t, e.srv.ConsoleURL)
	u, _ := url.Parse(e.srv.ConsoleURL)
	forged.hc.Jar.SetCookies(u, []*http.Cookie{{Name: "bae_console", Value: cookie.Value[:len(cookie.Value)-4] + "AAAA"}})
	resp, _ = forged.get("/keys")
	assert.Equal(t, http.StatusSeeOther, resp.StatusCode)

	token := c.csrf()
	resp, _ = c.post(stop, url.Values{}, nil)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "a Stop without the CSRF token")
	form := url.Values{"name": {"ci"}, "profile_id": {e.pid}}
	resp, body = c.post("/keys", form, nil)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "no CSRF token")
	assert.NotContains(t, body, "bae_")
	form.Set("csrf", token+"x")
	resp, _ = c.post("/keys", form, nil)
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "wrong CSRF token")
	form.Set("csrf", token)
	resp, _ = c.post("/keys", form, http.Header{"Sec-Fetch-Site": {"cross-site"}, "Origin": {"https://evil.example"}})
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "a cross-origin form post")
	resp, body = c.post("/keys", form, http.Header{"Sec-Fetch-Site": {"same-origin"}})
	require.Equal(t, http.StatusCreated, resp.StatusCode, body)
	secret := regexp.MustCompile(`id="new-key-secret">(bae_[0-9a-f]+)<`).FindStringSubmatch(body)
	require.NotNil(t, secret)
	assert.Contains(t, resp.Header.Get("Cache-Control"), "no-store")
	assert.Contains(t, resp.Header.Get("Content-Security-Policy"), "script-src 'self'")
	_, body = c.get("/keys")
	assert.NotContains(t, body, secret[1], "shown once")
	for _, page := range []string{"/sessions", "/keys", "/profiles", "/profiles/" + e.pid, "/config"} {
		_, body = c.get(page)
		assert.NotContains(t, body, e.srv.AdminKey, page)
		assert.NotContains(t, body, "sk-console-test-secret", page)
	}

	// A live stream ends as soon as its login expires. Log in afresh so
	// the whole 3 s are left.
	sid, _ := e.openDriver(t, "stream")
	c.login()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.ConsoleURL+"/sessions/"+sid+"/stream", nil)
	require.NoError(t, err)
	streamed, err := c.hc.Do(req)
	require.NoError(t, err)
	defer streamed.Body.Close()
	require.Equal(t, http.StatusOK, streamed.StatusCode)
	assert.Equal(t, "text/event-stream", streamed.Header.Get("Content-Type"))
	var events []string
	sc := bufio.NewScanner(streamed.Body)
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	for sc.Scan() {
		if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			events = append(events, ev)
		}
	}
	require.NoError(t, ctx.Err(), "the stream should have ended by itself")
	assert.Equal(t, []string{"timeline", "transcript", "state", "logout"}, events)
	resp, _ = c.get("/sessions/" + sid + "/stream")
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "an expired login cannot reconnect")

	// Password guessing is rate limited per address, the right password
	// included once the budget is spent.
	limited := false
	for range 10 {
		resp, _ = c.post("/login", url.Values{"password": {"guess"}}, nil)
		if resp.StatusCode == http.StatusTooManyRequests {
			limited = true
			assert.NotEmpty(t, resp.Header.Get("Retry-After"))
			break
		}
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	}
	require.True(t, limited, "no 429 after 10 wrong passwords")
	resp, _ = c.post("/login", url.Values{"password": {consolePassword}}, nil)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
}

// TestConsoleProfileSandboxLimits: the profile form shows a profile's
// sandbox overrides and saving it keeps them (PUT replaces the profile, so a
// form that dropped them would reset them).
func TestConsoleProfileSandboxLimits(t *testing.T) {
	e := newConsoleEnv(t, nil)
	c := newClient(t, e.srv.ConsoleURL)
	c.login()
	r := e.srv.Admin(t, http.MethodPut, "/admin/v1/profiles/"+e.pid, map[string]any{"name": "main", "primary_provider": "primary",
		"sandbox": map[string]any{"network": "bridge", "memory_mib": 1024}})
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	sandbox := func() any {
		r := e.srv.Admin(t, http.MethodGet, "/admin/v1/profiles/"+e.pid, nil)
		require.Equal(t, http.StatusOK, r.Status)
		return r.Body["sandbox"]
	}

	_, body := c.get("/profiles/" + e.pid)
	m := regexp.MustCompile(`(?s)<textarea name="sandbox_json"[^>]*>(.*?)</textarea>`).FindStringSubmatch(body)
	require.NotNil(t, m, "the form has the sandbox field")
	shown := strings.NewReplacer("&#34;", `"`, "&quot;", `"`).Replace(m[1])
	assert.JSONEq(t, `{"network": "bridge", "memory_mib": 1024}`, shown)

	csrf := c.csrf()
	save := func(sandboxJSON string) (*http.Response, string) {
		return c.post("/profiles/"+e.pid, url.Values{"csrf": {csrf}, "name": {"main"}, "primary_provider": {"primary"}, "sandbox_json": {sandboxJSON}},
			http.Header{"Sec-Fetch-Site": {"same-origin"}})
	}
	resp, body := save(shown)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	assert.Equal(t, map[string]any{"network": "bridge", "memory_mib": 1024.0}, sandbox(), "saving the form as shown keeps the overrides")

	resp, body = save(`{"network": "host"}`)
	assert.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
	assert.Contains(t, body, "invalid_sandbox")
	resp, body = save(`{network`)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, body, "Sandbox limits must be a JSON object")
	assert.Equal(t, map[string]any{"network": "bridge", "memory_mib": 1024.0}, sandbox(), "refused forms store nothing")

	resp, body = save("")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	assert.Equal(t, map[string]any{}, sandbox(), "an emptied field clears the overrides")
}

// TestConsoleProfileProviderWarnings saves a profile whose providers the
// registry does not hold: the admin API stores it and warns, and the
// console takes the operator to the profile's page, which shows why.
func TestConsoleProfileProviderWarnings(t *testing.T) {
	e := newConsoleEnv(t, nil)
	c := newClient(t, e.srv.ConsoleURL)
	c.login()
	csrf := c.csrf()
	save := func(primary string, fallbacks ...string) *http.Response {
		resp, body := c.post("/profiles/"+e.pid, url.Values{"csrf": {csrf}, "name": {"main"}, "primary_provider": {primary}, "fallback": fallbacks},
			http.Header{"Sec-Fetch-Site": {"same-origin"}})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
		return resp
	}
	resp := save("not-yet", "also-not-yet")
	assert.Equal(t, "/profiles/"+e.pid+"?saved=1", resp.Header.Get("Location"))
	_, body := c.get("/profiles/" + e.pid + "?saved=1")
	assert.Contains(t, body, "Profile saved.")
	m := regexp.MustCompile(`(?s)<section class="alert warn" id="profile-warnings".*?</section>`).FindString(body)
	require.NotEmpty(t, m, "the page shows the warnings")
	assert.Contains(t, m, `data-warning="primary_provider_unavailable"`)
	assert.Contains(t, m, `data-warning="fallback_provider_unavailable"`)
	assert.Contains(t, m, "sessions on this profile are refused with 422 primary_provider_unavailable")
	_, body = c.get("/profiles")
	assert.Contains(t, body, "not configured")

	resp = save("primary")
	assert.Equal(t, "/profiles?saved="+e.pid, resp.Header.Get("Location"), "no warning: back to the list")
	_, body = c.get("/profiles/" + e.pid)
	assert.NotContains(t, body, "profile-warnings")
	_, body = c.get("/profiles")
	assert.NotContains(t, body, "not configured")
}

// cookieOf is the client's console login cookie.
func (c *client) cookieOf() *http.Cookie {
	c.t.Helper()
	u, err := url.Parse(c.base)
	require.NoError(c.t, err)
	for _, ck := range c.hc.Jar.Cookies(u) {
		if ck.Name == "bae_console" {
			return ck
		}
	}
	require.FailNow(c.t, "no console cookie")
	return nil
}

// withCookie is a fresh client holding a copy of a saved cookie.
func withCookie(t *testing.T, base string, ck *http.Cookie) *client {
	c := newClient(t, base)
	u, err := url.Parse(base)
	require.NoError(t, err)
	c.hc.Jar.SetCookies(u, []*http.Cookie{{Name: ck.Name, Value: ck.Value}})
	return c
}

// TestConsoleLogoutEndsLogin: a copy of the cookie saved before logout is
// refused afterwards, pages, writes and streams alike; other logins go on.
// A changed password ends every login made with the old one.
func TestConsoleLogoutEndsLogin(t *testing.T) {
	e := newConsoleEnv(t, nil)
	c := newClient(t, e.srv.ConsoleURL)
	c.login()
	other := newClient(t, e.srv.ConsoleURL)
	other.login()
	saved := c.cookieOf()
	replay := withCookie(t, e.srv.ConsoleURL, saved)
	resp, _ := replay.get("/keys")
	require.Equal(t, http.StatusOK, resp.StatusCode, "the copy works while the login lasts")
	csrf := c.csrf()

	resp, _ = c.post("/logout", url.Values{"csrf": {csrf}}, http.Header{"Sec-Fetch-Site": {"same-origin"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	assert.Equal(t, "/login", resp.Header.Get("Location"))

	replay = withCookie(t, e.srv.ConsoleURL, saved)
	for _, page := range []string{"/keys", "/config", "/sessions"} {
		resp, _ = replay.get(page)
		assert.Equal(t, http.StatusSeeOther, resp.StatusCode, page)
		assert.True(t, strings.HasPrefix(resp.Header.Get("Location"), "/login?"), page)
	}
	resp, _ = replay.post("/keys", url.Values{"csrf": {csrf}, "name": {"x"}, "profile_id": {e.pid}}, http.Header{"Sec-Fetch-Site": {"same-origin"}})
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a write with the saved cookie and its token")
	sid, _ := e.openDriver(t, "replay")
	// Only the status is read: a stream that were let in would not end.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.ConsoleURL+"/sessions/"+sid+"/stream", nil)
	require.NoError(t, err)
	resp, err = replay.hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a stream with the saved cookie")

	resp, _ = other.get("/keys")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "another browser's login is untouched")

	// The password changes: a console started with the new one over the same
	// database ends the old password's logins, on every replica.
	rotated, err := console.New(console.Options{
		Store: e.srv.Parts.Store, Hub: e.srv.Parts.Hub, Admin: http.NotFoundHandler(), Log: slog.New(slog.DiscardHandler),
		Password: "a-new-console-password", Salt: "x",
	})
	require.NoError(t, err)
	n, err := rotated.EndOtherPasswordLogins(context.Background())
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the other browser's login")
	resp, _ = other.get("/keys")
	assert.Equal(t, http.StatusSeeOther, resp.StatusCode, "a login made with the old password is over")
	other.login()
	resp, _ = other.get("/keys")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "a replica still on the old password lets its operator log in again")
}

// URLs are shown without user info or query, and MCP args as configured
// but for credentials, in every view: the provider.request event, the admin
// API's config and the console's config page. No resolved ${VAR} value
// reaches a view or the log, even when the MCP server it is for fails.
func TestURLsRedactedInEventsAndViews(t *testing.T) {
	// Tokens resolve from the process environment at use.
	t.Setenv("BAE_CONSOLE_TEST_TOKEN", "sk-resolved-provider-secret")
	t.Setenv("BAE_CONSOLE_TEST_ARG", "mcp-resolved-arg-secret")
	t.Setenv("BAE_CONSOLE_TEST_BIN", "/nonexistent/mcp-resolved-bin-secret")
	e := newConsoleEnv(t, nil)
	secrets := []string{"base-url-secret", "gw-user", "mcp-url-secret", "mcp-query-secret", "mcp-arg-secret", "sk-console-test-secret", "mcp-header-secret",
		"sk-resolved-provider-secret", "mcp-resolved-arg-secret", "mcp-resolved-bin-secret"}

	// A session whose profile names the stdio server: its connect fails
	// (no such command) and is logged.
	mcpPid := e.srv.Profile(t, map[string]any{"name": "files-bot", "primary_provider": "primary", "mcp_servers": []string{"files"}})
	_, mcpKey := e.srv.Key(t, mcpPid)
	mcpSid, mcpSk := e.srv.Open(t, mcpKey, map[string]any{"client_version": "redact-mcp"})
	require.Equal(t, map[string]any{"registered": true}, testenv.Terminal(t, e.srv.Call(t, mcpSid, mcpSk, "session.registerDriver", nil))["result"])
	e.fake.Lane("primary").Enqueue(fakeprovider.Text("no tools"))
	require.NotNil(t, testenv.Terminal(t, e.srv.RPC(t, mcpSid, mcpSk, send(1, "hello")))["result"])
	require.Contains(t, e.logs.String(), "MCP server failed to connect", "the stdio server's failure is logged")

	sid, sk := e.openDriver(t, "redact")
	e.fake.Lane("primary").Enqueue(fakeprovider.Text("hi"))
	objs := e.srv.RPC(t, sid, sk, send(1, "hello"))
	require.NotNil(t, testenv.Terminal(t, objs)["result"], "%v", objs)
	ev := e.srv.Client(t, http.MethodGet, "/api/v1/sessions/"+sid+"/events", sk, nil)
	require.Equal(t, http.StatusOK, ev.Status, string(ev.Raw))
	require.Contains(t, string(ev.Raw), `"base_url":"http://127.0.0.1:`, "the request event names the host")
	admin := e.srv.Admin(t, http.MethodGet, "/admin/v1/config", nil)
	require.Equal(t, http.StatusOK, admin.Status)
	assert.Contains(t, string(admin.Raw), `"url":"http://127.0.0.1:1/mcp"`)
	providers := e.srv.Admin(t, http.MethodGet, "/admin/v1/providers", nil)
	c := newClient(t, e.srv.ConsoleURL)
	c.login()
	_, page := c.get("/config")
	// BAE shows args as configured: a ${VAR} token stays the token.
	assert.Contains(t, string(admin.Raw), `"args":["--token","••••••••","--root=${BAE_CONSOLE_TEST_ARG}","/data"]`)
	assert.Contains(t, page, "${BAE_CONSOLE_TEST_BIN}/mcp-files --token •••••••• --root=${BAE_CONSOLE_TEST_ARG} /data")
	logs := e.logs.String()
	for _, secret := range secrets {
		assert.NotContains(t, logs, secret, "the log")
		assert.NotContains(t, string(ev.Raw), secret, "events")
		assert.NotContains(t, string(admin.Raw), secret, "GET /admin/v1/config")
		assert.NotContains(t, string(providers.Raw), secret, "GET /admin/v1/providers")
		assert.NotContains(t, page, secret, "the console's config page")
	}
}
