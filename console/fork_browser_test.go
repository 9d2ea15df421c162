package console_test

import (
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
	"github.com/bae-go/bae-go/internal/testing/testenv"
)

// TestConsoleForkAndRewind: "Fork from here" on a turn opens the fork's
// page, which draws the tree of forks; "Rewind to here" on the source takes
// that turn and the later ones out of the conversation, drawn struck
// through, and the driver's next message is sent without them.
func TestConsoleForkAndRewind(t *testing.T) {
	e := newConsoleEnv(t, nil)
	b := newBrowser(t, e.srv.ConsoleURL)
	b.login()
	sid, sk := e.openDriver(t, "fork/1.0")
	lane := e.fake.Lane("primary")
	for i, q := range []string{"Plan a trip to Lyon.", "Now make it cheaper.", "Add a museum."} {
		lane.Enqueue(fakeprovider.Text("Answer " + string(rune('A'+i)) + "."))
		term := testenv.Terminal(t, e.srv.RPC(t, sid, sk, send(i+1, q)))
		require.Nil(t, term["error"], "%v", term["error"])
	}
	b.do(chromedp.Navigate(b.url + "/sessions/" + sid))
	b.waitFor(`document.querySelectorAll('#transcript article.turn button.fork').length === 3`)
	assert.Equal(t, 3, run(b, chromedp.Evaluate[int](`document.querySelectorAll('#transcript article.turn button.rewind').length`)))
	assert.Zero(t, run(b, chromedp.Evaluate[int](`document.querySelectorAll('#fork-tree').length`)), "no tree before a fork")

	// Fork from the first turn: the fork's page, with the tree.
	b.do(chromedp.Click(chromedp.CSS("#transcript article.turn:nth-of-type(1) button.fork")))
	b.waitFor(`location.pathname !== '/sessions/` + sid + `' && document.querySelector('#fork-tree') !== null`)
	fork := b.location()
	assert.Equal(t, 2, run(b, chromedp.Evaluate[int](`document.querySelectorAll('#fork-tree li').length`)))
	assert.Contains(t, b.text("#fork-tree li.current"), "this session")
	assert.Equal(t, 1, run(b, chromedp.Evaluate[int](`document.querySelectorAll('#transcript article.turn').length`)), "the fork inherited the first turn")
	assert.Zero(t, run(b, chromedp.Evaluate[int](`document.querySelectorAll('#transcript article.turn button.rewind').length`)), "a fork cannot rewind what it inherited")
	b.screenshot("session-fork-tree")

	// Back on the source: rewind to the second turn.
	b.do(chromedp.Navigate(b.url + "/sessions/" + sid))
	b.waitFor(`document.querySelectorAll('#fork-tree li').length === 2`)
	b.navigateBy(chromedp.Click(chromedp.CSS("#transcript article.turn:nth-of-type(2) button.rewind")))
	b.waitFor(`document.querySelectorAll('#transcript article.turn.rewound').length === 2`)
	assert.NotContains(t, run(b, chromedp.Evaluate[string](`document.querySelector('#transcript article.turn:nth-of-type(1)').className`)), "rewound")
	assert.Contains(t, b.text("#transcript article.turn.rewound .badge.rewound"), "operator")
	assert.Contains(t, b.text("#transcript"), "Rewound 2 turn(s)")
	assert.Equal(t, "line-through", run(b, chromedp.Evaluate[string](`getComputedStyle(document.querySelector('#transcript article.turn.rewound .bubble')).textDecorationLine`)))
	b.screenshot("session-rewound")
	assert.NotEqual(t, b.url+"/sessions/"+sid, fork)

	lane.Enqueue(fakeprovider.Text("Answer D."))
	n := len(e.fake.Requests())
	term := testenv.Terminal(t, e.srv.RPC(t, sid, sk, send(9, "Start over: a week in Porto.")))
	require.Nil(t, term["error"], "%v", term["error"])
	assert.Len(t, e.fake.Requests()[n].Messages(), 3, "the first turn and the new message")
}
