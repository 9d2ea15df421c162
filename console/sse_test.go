package console

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sseEvent is one event as a browser's EventSource dispatches it.
type sseEvent struct{ event, id, data string }

// parseSSE follows the event-stream parsing rules of the HTML standard:
// lines end at \r\n, \r or \n; a blank line dispatches the event.
func parseSSE(stream string) []sseEvent {
	var out []sseEvent
	var cur sseEvent
	var data []string
	lines := strings.Split(strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(stream), "\n")
	for _, line := range lines[:len(lines)-1] { // the text after the last line ending is not a line
		if line == "" {
			if data != nil {
				cur.data = strings.Join(data, "\n")
				out = append(out, cur)
			}
			cur, data = sseEvent{}, nil
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			cur.event = value
		case "id":
			cur.id = value
		case "data":
			data = append(data, value)
		}
	}
	return out
}

func TestWriteSSEKeepsDataInsideItsEvent(t *testing.T) {
	cases := map[string]string{
		"bare CR":     "hello\r\revent: logout\rdata: http://attacker.example/login\r\r",
		"CRLF":        "hello\r\n\r\nevent: logout\r\ndata: http://attacker.example/login\r\n\r\n",
		"LF":          "hello\n\nevent: logout\ndata: http://attacker.example/login\n\n",
		"mixed":       "a\r\n\rb\n\r\nevent: logout\r",
		"CR at start": "\revent: logout",
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			var b strings.Builder
			writeSSE(&b, "transcript", "7", data)
			writeSSE(&b, "state", "", "open")
			evs := parseSSE(b.String())
			require.Len(t, evs, 2, "stream: %q", b.String())
			want := strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(data)
			assert.Equal(t, sseEvent{event: "transcript", id: "7", data: want}, evs[0])
			assert.Equal(t, sseEvent{event: "state", data: "open"}, evs[1])
		})
	}
}

func TestWriteSSEFormat(t *testing.T) {
	var b strings.Builder
	writeSSE(&b, "timeline", "12", "<li>a</li>\r\n<li>b\rc</li>")
	assert.Equal(t, "event: timeline\nid: 12\ndata: <li>a</li>\ndata: <li>b\ndata: c</li>\n\n", b.String())
}
