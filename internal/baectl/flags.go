package baectl

import (
	"fmt"

	"github.com/spf13/pflag"
)

// globalOpts are the connection flags accepted before or after any
// subcommand (persistent flags of the root command).
type globalOpts struct {
	adminAddr    string
	adminToken   string
	adminKeyFile string
}

func (g *globalOpts) register(fs *pflag.FlagSet) {
	fs.StringVar(&g.adminAddr, "admin-addr", "", "admin API `HOST:PORT` (or a full URL); overrides BAE_ADMIN_ADDR, default 127.0.0.1:8081")
	fs.StringVar(&g.adminToken, "admin-token", "", "admin bearer `TOKEN`; overrides BAE_ADMIN_TOKEN and every key file")
	fs.StringVar(&g.adminKeyFile, "admin-key-file", "", "`PATH` of a plaintext admin key file; overrides BAE_ADMIN_KEY_FILE")
}

// usageError is a command-line mistake: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{msg: fmt.Sprintf(format, a...)} }
