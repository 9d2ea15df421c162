// Command baectl is the bae-go admin CLI. See internal/baectl.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/bae-go/bae-go/internal/baectl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := baectl.RunWithInput(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.LookupEnv)
	stop()
	os.Exit(code)
}
