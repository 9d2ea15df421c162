package launcher

import (
	"errors"
	"strconv"

	"github.com/spf13/cobra"
)

// Exit codes shared by baesched and baeapi, as BAE's launchers use them.
const (
	ExitOK      = 0
	ExitRuntime = 1 // an environment failure: unreadable file (baeapi), bind, Temporal
	ExitUsage   = 2 // a configuration the operator wrote wrong
)

// UsageError is a mistake in what the operator wrote (config file, env var):
// exit code 2.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// ExitCode maps an error returned by a launcher's run function to its
// process exit code: nil is 0, a UsageError 2, anything else 1.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ue *UsageError
	if errors.As(err, &ue) {
		return ExitUsage
	}
	return ExitRuntime
}

// NoArgs is cobra.NoArgs as a usage error: a stray argument exits 2.
func NoArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return &UsageError{Msg: "unexpected argument " + strconv.Quote(args[0]) + " for " + cmd.CommandPath()}
	}
	return nil
}
