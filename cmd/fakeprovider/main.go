// Command fakeprovider serves a local stand-in LLM provider that speaks the
// Anthropic Messages (/v1/messages) and OpenAI Chat Completions
// (/v1/chat/completions) wire formats and answers "echo: <your message>".
// It lets you try bae-go without provider credentials or internet access.
package main

import (
	"flag"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/bae-go/bae-go/internal/fakeprovider"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9999", "listen address")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	log.Info("fake provider listening", "base_url", "http://"+*addr)
	srv := &http.Server{Addr: *addr, Handler: fakeprovider.NewHandler(), ReadHeaderTimeout: 10 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		log.Error("fake provider stopped", "err", err)
		os.Exit(1)
	}
}
