// Command fakeprovider serves a local stand-in LLM provider that speaks the
// Anthropic Messages (/v1/messages) and OpenAI Chat Completions
// (/v1/chat/completions) wire formats, so bae-go can be tried without
// provider credentials or internet access. It answers "echo: <your
// message>", except that a message naming one of the declared tools (or
// asking for the time while a time tool is declared) gets a call to that
// tool, and the tool's result gets a text answer quoting it: see
// fakeprovider.Demo.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/bae-go/bae-go/internal/lib/healthprobe"
	"github.com/bae-go/bae-go/internal/testing/fakeprovider"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9999", "listen address")
	check := flag.Bool("healthcheck", false, "probe the fake provider listening on -addr (GET /healthz) and exit 0 when it answers, else 1: a container health check")
	cache := flag.Bool("cache", true, "emulate prompt caching (cache reads and writes in usage)")
	flag.Parse()
	if *check {
		url, err := healthprobe.URL(*addr, "/healthz")
		if err == nil {
			err = healthprobe.Check(context.Background(), url)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "fakeprovider:", err)
			os.Exit(1)
		}
		return
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	h := fakeprovider.NewHandler()
	h.Respond(fakeprovider.Demo)
	h.Caching(*cache)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.Handle("/", h)
	log.Info("fake provider listening", "base_url", "http://"+*addr)
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		log.Error("fake provider stopped", "err", err)
		os.Exit(1)
	}
}
