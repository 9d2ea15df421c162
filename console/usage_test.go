package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// TestConsoleUsageAndBudgets: the usage page draws today's tokens as a bar
// of the per-day chart and lists the session and key that spent them; a
// budget set, reset and removed through its forms reaches the admin API,
// is audited as the console's, and shows on the session's page.
func TestConsoleUsageAndBudgets(t *testing.T) {
	e := newConsoleEnv(t, nil)
	sid, sk := e.openDriver(t, "usage-test")
	term := testenv.Terminal(t, e.srv.RPC(t, sid, sk, send(1, "hello")))
	require.Nil(t, term["error"], "%v", term["error"])
	c := newClient(t, e.srv.ConsoleURL)
	c.login()

	resp, body := c.get("/usage?days=7")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	today := time.Now().UTC().Format(time.DateOnly)
	bar := regexp.MustCompile(`(?s)<g class="bar" data-day="` + today + `"><title>[^<]*</title>(.*?)</g>`).FindStringSubmatch(body)
	require.NotNil(t, bar, "today's bar in the chart")
	assert.Contains(t, bar[1], `class="seg-input"`)
	assert.Contains(t, bar[1], `class="seg-output"`)
	assert.Equal(t, 7, strings.Count(body, `<g class="bar"`), "one bar per day of the range")
	assert.Regexp(t, `id="top-sessions"(?s:.*)href="/sessions/`+sid+`"`, body)

	csrf := c.csrf()
	same := http.Header{"Sec-Fetch-Site": {"same-origin"}}
	resp, body = c.post("/budgets", url.Values{"csrf": {csrf}, "scope": {"session"}, "subject": {sid}, "limit": {"5"}, "unit": {"tokens"}, "period": {"none"}, "next": {"/sessions/" + sid}}, same)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, body)
	assert.Equal(t, "/sessions/"+sid, resp.Header.Get("Location"))
	r := e.srv.Admin(t, http.MethodGet, "/admin/v1/budgets/session/"+sid, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	assert.Equal(t, true, r.Body["exhausted"], "the first turn spent more than 5 tokens")

	_, body = c.get("/sessions/" + sid)
	assert.Regexp(t, `id="session-usage"(?s:.*)data-budget="session"[^>]*>session budget: \d+ of 5 tokens \(spent\)`, body)

	resp, body = c.post("/budgets", url.Values{"csrf": {csrf}, "scope": {"session"}, "subject": {sid}, "limit": {"5"}, "unit": {"tokens"}, "period": {"day"}}, same)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, body, "lifetime cap")

	resp, _ = c.post("/budgets/change", url.Values{"csrf": {csrf}, "scope": {"session"}, "subject": {sid}, "action": {"reset"}}, same)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	r = e.srv.Admin(t, http.MethodGet, "/admin/v1/budgets/session/"+sid, nil)
	assert.Equal(t, false, r.Body["exhausted"])
	resp, _ = c.post("/budgets/change", url.Values{"csrf": {csrf}, "scope": {"session"}, "subject": {sid}, "action": {"remove"}}, same)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	r = e.srv.Admin(t, http.MethodGet, "/admin/v1/budgets/session/"+sid, nil)
	assert.Equal(t, http.StatusNotFound, r.Status)

	audit := e.srv.Admin(t, http.MethodGet, "/admin/v1/budgets/changes", nil)
	var who []string
	for _, it := range audit.Body["items"].([]any) {
		m := it.(map[string]any)
		who = append(who, m["actor"].(string)+" "+m["action"].(string))
	}
	assert.Equal(t, []string{"console remove", "console reset", "console set"}, who)
	_, body = c.get("/usage")
	assert.Contains(t, body, `id="budget-changes"`)
}
