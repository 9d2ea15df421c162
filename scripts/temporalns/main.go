// Command temporalns waits for a Temporal frontend to answer and registers a
// namespace on it unless it exists. A stock Temporal server starts with only
// its system namespace; the dev server baesrv embeds creates "default" itself.
//
//	go run ./scripts/temporalns -address 127.0.0.1:7233 -namespace default
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"
)

func main() {
	addr := flag.String("address", "127.0.0.1:7233", "Temporal frontend host:port")
	ns := flag.String("namespace", "default", "namespace to register")
	retention := flag.Duration("retention", 72*time.Hour, "workflow history retention of a new namespace")
	wait := flag.Duration("wait", 2*time.Minute, "how long to wait for the frontend")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *wait)
	defer cancel()
	if err := register(ctx, *addr, *ns, *retention); err != nil {
		fmt.Fprintln(os.Stderr, "temporalns:", err)
		os.Exit(1)
	}
}

func register(ctx context.Context, addr, ns string, retention time.Duration) error {
	for {
		err := try(ctx, addr, ns, retention)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace %q on %s: %w", ns, addr, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func try(ctx context.Context, addr, ns string, retention time.Duration) error {
	nc, err := client.NewNamespaceClient(client.Options{HostPort: addr})
	if err != nil {
		return err
	}
	defer nc.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = nc.Register(cctx, &workflowservice.RegisterNamespaceRequest{
		Namespace: ns, WorkflowExecutionRetentionPeriod: durationpb.New(retention),
	})
	var exists *serviceerror.NamespaceAlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return err
	}
	// A new namespace reaches the frontend's namespace cache some seconds
	// after it is stored; until then calls in it fail with NamespaceNotFound.
	// Wait for that so the caller can start workflows at once.
	c, err := client.Dial(client.Options{HostPort: addr, Namespace: ns})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.DescribeWorkflowExecution(cctx, "temporalns-probe", "")
	var missing *serviceerror.NotFound
	if err != nil && !errors.As(err, &missing) {
		return err
	}
	return nil
}
