// Command temporalcli is a test stand-in for the Temporal CLI image
// (temporalio/temporal) that docker-compose.yml runs: the subset of the
// `temporal` command line the compose file and its health check use,
// served by the same embedded Temporal server `baesrv dev` runs
// (internal/testing/devstack). tests/compose builds it into an image,
// because this machine cannot pull the real one.
//
//	temporal server start-dev [--ip IP] [--port N] [--ui-ip IP] [--ui-port N] [--headless]
//	        [--db-filename FILE] [--namespace NS]... [--search-attribute NAME=TYPE]...
//	temporal operator cluster health [--address HOST:PORT]
//	temporal operator namespace describe [--namespace NS] [--address HOST:PORT]
//
// Any other command or flag is refused (exit 2), so a compose file naming
// one this stand-in does not know fails its test instead of being ignored.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/bae-go/bae-go/internal/testing/devstack"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	var ue usageError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintln(os.Stderr, "temporal:", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "temporal:", err)
		os.Exit(1)
	}
}

type usageError string

func (e usageError) Error() string { return string(e) }

func run(ctx context.Context, args []string, stderr io.Writer) error {
	cmd := strings.Join(args[:min(len(args), 3)], " ")
	switch {
	case strings.HasPrefix(cmd, "server start-dev"):
		return startDev(ctx, args[2:], stderr)
	case cmd == "operator cluster health":
		return health(ctx, args[3:])
	case cmd == "operator namespace describe":
		return describeNamespace(ctx, args[3:])
	}
	return usageError(fmt.Sprintf("the stand-in does not implement %q", strings.Join(args, " ")))
}

// list is a repeatable string flag.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func parse(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return usageError(fmt.Sprintf("%s: %v", fs.Name(), err))
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Sprintf("%s: unexpected arguments %q", fs.Name(), fs.Args()))
	}
	return nil
}

func startDev(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("server start-dev", flag.ContinueOnError)
	ip := fs.String("ip", "localhost", "")
	port := fs.Int("port", 7233, "")
	uiIP := fs.String("ui-ip", "", "")
	uiPort := fs.Int("ui-port", 0, "")
	headless := fs.Bool("headless", false, "")
	dbFile := fs.String("db-filename", "", "")
	var namespaces, attrs list
	fs.Var(&namespaces, "namespace", "")
	fs.Var(&attrs, "search-attribute", "")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *ip == "localhost" {
		*ip = "127.0.0.1"
	}
	if *uiIP != "" && *uiIP != *ip {
		return usageError("the stand-in serves the UI on --ip only")
	}
	if len(namespaces) > 1 || (len(namespaces) == 1 && namespaces[0] != devstack.DefaultNamespace) {
		return usageError("the stand-in registers the default namespace only")
	}
	sa := map[string]enumspb.IndexedValueType{}
	for _, a := range attrs {
		name, typ, ok := strings.Cut(a, "=")
		v, known := enumspb.IndexedValueType_shorthandValue[typ]
		if !ok || !known {
			return usageError(fmt.Sprintf("--search-attribute %q: want NAME=TYPE", a))
		}
		sa[name] = enumspb.IndexedValueType(v)
	}
	opts := devstack.Options{IP: *ip, FrontendPort: *port, SearchAttributes: sa,
		Logger: slog.New(slog.NewTextHandler(stderr, nil))}
	switch {
	case *headless:
		opts.UIPort = -1
	case *uiPort != 0:
		opts.UIPort = *uiPort
	default:
		opts.UIPort = *port + 1000
	}
	if *dbFile != "" {
		if filepath.Base(*dbFile) != devstack.DBFileName {
			return usageError("the stand-in's --db-filename must end in /" + devstack.DBFileName)
		}
		opts.DataDir = filepath.Dir(*dbFile)
	}
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	srv, err := devstack.Start(startCtx, opts)
	if err != nil {
		return err
	}
	opts.Logger.Info("temporal dev server stand-in serving", "frontend", srv.FrontendAddr(), "ui", srv.UIAddr())
	<-ctx.Done()
	return srv.Stop()
}

func dial(args []string, name string, extra func(fs *flag.FlagSet)) (client.Client, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	addr := fs.String("address", envOr("TEMPORAL_ADDRESS", "127.0.0.1:7233"), "")
	if extra != nil {
		extra(fs)
	}
	if err := parse(fs, args); err != nil {
		return nil, err
	}
	return client.Dial(client.Options{HostPort: *addr, Logger: quiet{}})
}

func health(ctx context.Context, args []string) error {
	c, err := dial(args, "operator cluster health", nil)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		return fmt.Errorf("failed checking cluster health: %w", err)
	}
	fmt.Println("SERVING")
	return nil
}

func describeNamespace(ctx context.Context, args []string) error {
	var ns *string
	c, err := dial(args, "operator namespace describe", func(fs *flag.FlagSet) {
		ns = fs.String("namespace", envOr("TEMPORAL_NAMESPACE", devstack.DefaultNamespace), "")
	})
	if err != nil {
		return err
	}
	defer c.Close()
	resp, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: *ns})
	if err != nil {
		return fmt.Errorf("describe namespace %s: %w", *ns, err)
	}
	fmt.Println(resp.GetNamespaceInfo().GetName(), resp.GetNamespaceInfo().GetState())
	return nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// quiet drops the SDK client's log lines: the commands print their result.
type quiet struct{}

func (quiet) Debug(string, ...any) {}
func (quiet) Info(string, ...any)  {}
func (quiet) Warn(string, ...any)  {}
func (quiet) Error(string, ...any) {}
