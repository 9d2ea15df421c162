package launcher

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
)

// textHandler writes a launcher's own log lines as BAE's launchers do: the
// time, the level and the message as written, then the attributes as
// key=value. slog's TextHandler would quote the message and escape the
// quotes inside it, and operators grep BAE's launcher logs for messages
// that hold quotes (agent "nightly" skipped: previous invocation still
// running). The attributes are formatted by a TextHandler all the same.
type textHandler struct {
	w     io.Writer
	attrs slog.Handler // writes only the attributes, into *buf
	buf   *bytes.Buffer
	mu    *sync.Mutex // one record at a time through buf and w
}

var msgEscaper = strings.NewReplacer("\n", `\n`, "\r", `\r`)

func newTextHandler(w io.Writer, o *slog.HandlerOptions) *textHandler {
	h := &textHandler{w: w, buf: &bytes.Buffer{}, mu: &sync.Mutex{}}
	inner := *o
	inner.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey || a.Key == slog.MessageKey) {
			return slog.Attr{}
		}
		return a
	}
	h.attrs = slog.NewTextHandler(h.buf, &inner)
	return h
}

func (h *textHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.attrs.Enabled(ctx, l)
}

func (h *textHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.buf.Reset()
	if err := h.attrs.Handle(ctx, r); err != nil {
		return err
	}
	attrs := bytes.TrimRight(h.buf.Bytes(), "\n")
	line := make([]byte, 0, 64+len(r.Message)+len(attrs))
	if !r.Time.IsZero() {
		line = r.Time.UTC().AppendFormat(line, "2006-01-02T15:04:05.000Z07:00")
		line = append(line, ' ')
	}
	line = append(line, r.Level.String()...)
	line = append(line, ' ')
	line = append(line, msgEscaper.Replace(r.Message)...) // one record, one line
	if len(attrs) > 0 {
		line = append(line, ' ')
		line = append(line, attrs...)
	}
	line = append(line, '\n')
	_, err := h.w.Write(line)
	return err
}

func (h *textHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = h.attrs.WithAttrs(as)
	return &c
}

func (h *textHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.attrs = h.attrs.WithGroup(name)
	return &c
}
