package trigger

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/testenv"
)

func chromiumPath(t *testing.T) string {
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

const appTOML = `
[[agents]]
name = "echo"
command = "sh"
args = ["-c", "echo \"you said: $P\"; echo second line"]
display_name = "Echo agent"
description = "Says it back."
icon = "🦜"
chat_input_field = "text"
[agents.request_schema]
type = "object"
required = ["text"]
[agents.request_schema.properties.text]
type = "string"
[[agents.env_template]]
field = "text"
env = "P"
[[agents.prompts]]
label = "Say hello"
prompt = "hello there"

[[agents]]
name = "plain"
command = "true"
`

func TestWebAppInBrowser(t *testing.T) {
	ts := testenv.Temporal(t)
	e := startAPI(t, ts.GetDefaultClient(), appTOML, func(o *Options) { o.WebApp = true; o.Token = "app-token" })

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	require.NoError(t, chromedp.Do(ctx), "start chromium")
	do := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		c, done := context.WithTimeout(ctx, 45*time.Second)
		defer done()
		require.NoError(t, chromedp.Do(c, steps...))
	}
	text := func(expr string) string {
		t.Helper()
		c, done := context.WithTimeout(ctx, 45*time.Second)
		defer done()
		v, err := chromedp.Run(c, chromedp.Evaluate[string](expr))
		require.NoError(t, err)
		return v
	}
	wait := func(expr string) {
		t.Helper()
		c, done := context.WithTimeout(ctx, 45*time.Second)
		defer done()
		_, err := chromedp.Run(c, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond)))
		require.NoError(t, err, "waiting for %s; page shows %q", expr, text("document.body.innerText"))
	}

	// The card grid: one card per agent, with its presentation fields.
	do(chromedp.Navigate(e.url + "/"))
	wait(`document.querySelectorAll(".card").length === 2`)
	home := text("document.body.innerText")
	require.Contains(t, home, "Echo agent")
	require.Contains(t, home, "Says it back.")
	require.Contains(t, home, "🦜")
	require.Contains(t, home, "plain")

	// The chat page asks for the token on 401, then streams the run.
	require.Equal(t, e.url+"/agents/echo", text(`document.querySelector('.card[data-agent="echo"]').href`))
	do(chromedp.Navigate(e.url + "/agents/echo"))
	wait(`!!document.getElementById("input")`)
	do(chromedp.SendKeys(chromedp.CSS("#input"), "it's <b>me</b>"), chromedp.Click(chromedp.CSS("#go")))
	wait(`!document.getElementById("token").hidden`)
	do(chromedp.SendKeys(chromedp.CSS("#token-input"), "app-token"), chromedp.Click(chromedp.CSS("#token button")))
	wait(`!!document.querySelector(".msg.run .status")`)
	out := text(`document.querySelector(".msg.run").innerText`)
	require.Contains(t, out, "you said: it's <b>me</b>", "the message is text, not markup")
	require.Contains(t, out, "second line")
	require.Contains(t, out, "exit code 0")
	require.Equal(t, 0, strings.Count(text("document.body.innerHTML"), "<b>me</b>"))

	// A prompt button triggers the same route with its prompt.
	do(chromedp.Click(chromedp.CSS("button.prompt")))
	wait(`document.querySelectorAll(".msg.run .status").length === 2`)
	require.Contains(t, text(`document.querySelectorAll(".msg.run")[1].innerText`), "you said: hello there")
}
