//go:build !dev

package main

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/bae-go/bae-go/internal/config"
)

// devCommand stands in for `baesrv dev` in builds without the "dev" tag,
// which leave the embedded Temporal server and UI out of the binary.
func devCommand(_ io.Writer, _ *cliFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "dev",
		Short: "Not in this build: the embedded Temporal dev server needs `make build` (go build -tags dev)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return ran(&config.ValidationError{Msg: "this baesrv was built without the embedded Temporal dev server; " +
				"build it with `make build` (or `go build -tags dev -o bin/ ./cmd/baesrv`) to use `baesrv dev`, " +
				"or run `baesrv serve` against a Temporal cluster (BAE_TEMPORAL_ADDR)"})
		},
	}
}
