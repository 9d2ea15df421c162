package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/bae-go/bae-go/internal/config"
	"github.com/bae-go/bae-go/internal/lib/healthprobe"
)

// healthcheckCommand is the image's HEALTHCHECK: it asks the server in the
// same container, so the image needs no curl.
func healthcheckCommand() *cobra.Command {
	var ready bool
	cmd := &cobra.Command{
		Use:   "healthcheck",
		Short: "Exit 0 when the server at BAE_ADDR answers /healthz (with --ready, /readyz), else 1",
		Long: `healthcheck is a container health check: it GETs /healthz (liveness) or,
with --ready, /readyz (PostgreSQL and Temporal reachable) from the client
port BAE_ADDR names, on loopback when BAE_ADDR listens on every interface.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			srv, err := config.ServerFromEnv(func(k string) (string, bool) {
				// Only the address matters here: a probe must not fail on
				// settings the server itself reports at startup.
				if k == "BAE_ADDR" {
					return os.LookupEnv(k)
				}
				return "", false
			})
			if err != nil {
				return ran(err)
			}
			path := "/healthz"
			if ready {
				path = "/readyz"
			}
			url, err := healthprobe.URL(srv.Addr, path)
			if err != nil {
				return ran(err)
			}
			return ran(healthprobe.Check(cmd.Context(), url))
		},
	}
	cmd.Flags().BoolVar(&ready, "ready", false, "probe /readyz (dependencies) instead of /healthz (liveness)")
	return cmd
}
