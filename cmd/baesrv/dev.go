//go:build dev

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/bae-go/bae-go/internal/app"
	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/sessionclient"
	"github.com/bae-go/bae-go/internal/testing/devstack"
)

// devCommand is `baesrv dev`: the server plus an embedded Temporal dev
// server and its Web UI. Only builds with the "dev" tag link them (about
// 1,500 packages), so the production binary stays small.
func devCommand(stderr io.Writer, f *cliFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "dev",
		Short: "Run the server with an embedded Temporal dev server and its Web UI, in one process",
		Long: `dev is serve plus an embedded Temporal server (SQLite in
<BAE_DATA_DIR>/temporal/) and the Temporal Web UI. The client API listens on
127.0.0.1:8080 unless BAE_ADDR says otherwise. For trying bae-go out and for
development, not for production.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ran(runDev(cmd.Context(), stderr, f))
		},
	}
}

func runDev(ctx context.Context, stderr io.Writer, f *cliFlags) error {
	opts, err := prepare(stderr, f)
	if err != nil {
		return err
	}
	if strings.TrimSpace(os.Getenv("BAE_ADDR")) == "" {
		opts.Server.Addr = config.DefaultDevAddr
	}
	// Every setting is checked before the embedded Temporal creates its
	// files, as serve checks them before it touches the database.
	if err := app.Check(opts); err != nil {
		return err
	}
	srv := opts.Server
	app.SetWorkflowCacheSize(srv.WorkflowCacheSize)
	dev, err := devstack.Start(ctx, devstack.Options{
		DataDir:          filepath.Join(srv.DataDir, "temporal"),
		FrontendPort:     srv.TemporalPort,
		UIPort:           srv.TemporalUIPort,
		Namespace:        srv.TemporalNamespace,
		Logger:           opts.Log,
		SearchAttributes: sessionclient.SearchAttributes,
	})
	if err != nil {
		return fmt.Errorf("start embedded temporal: %w", err)
	}
	defer dev.Stop() //nolint:errcheck
	opts.Server.TemporalAddr = dev.FrontendAddr()
	ui := dev.UIAddr()
	if ui != "" {
		opts.Log.Info("temporal web ui", "url", "http://"+ui)
	}
	readyCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go announceWhenServing(readyCtx, stderr, opts.Server, ui)
	return app.Run(ctx, opts)
}

// announceWhenServing waits for the client port's /healthz, then prints
// where everything is, once.
func announceWhenServing(ctx context.Context, w io.Writer, srv config.Server, ui string) {
	client := urlFor(srv.Addr)
	hc := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, client+"/healthz", nil)
		if err != nil {
			return
		}
		resp, err := hc.Do(req)
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
	}
	cwd, _ := os.Getwd()
	exe, _ := os.Executable()
	fmt.Fprint(w, devBanner(srv, ui, cwd, exe))
}
