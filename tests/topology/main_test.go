//go:build topology

// Package topology runs bae-go the way production does: a Temporal server of
// its own (scripts/temporal-up.sh: go.temporal.io/server's temporal-server on
// PostgreSQL, stock dynamic config) and two baesrv replicas on one database.
// Run it with `make test-topology`; it is not part of `make test`.
package topology

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/bae-go/bae-go/internal/lib/ids"
	"github.com/bae-go/bae-go/internal/sessionclient"
	"github.com/bae-go/bae-go/internal/testing/testdb"
)

// temporalAddr is the frontend of the Temporal server TestMain starts.
var temporalAddr string

// temporalEnv is the environment scripts/temporal-up.sh started it with (a
// test restarts it with the same).
var temporalEnv map[string]string

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "topology:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "bae-topology-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	ports, err := freePorts(9)
	if err != nil {
		return 0, err
	}
	suffix := ids.New("")[:10]
	env := map[string]string{
		"TEMPORAL_DIR":                      dir,
		"TEMPORAL_DB":                       "temporal_topo_" + suffix,
		"TEMPORAL_VISIBILITY_DB":            "temporal_topo_vis_" + suffix,
		"TEMPORAL_PORT":                     strconv.Itoa(ports[0]),
		"TEMPORAL_HISTORY_PORT":             strconv.Itoa(ports[1]),
		"TEMPORAL_MATCHING_PORT":            strconv.Itoa(ports[2]),
		"TEMPORAL_WORKER_PORT":              strconv.Itoa(ports[3]),
		"TEMPORAL_FRONTEND_MEMBERSHIP_PORT": strconv.Itoa(ports[4]),
		"TEMPORAL_HISTORY_MEMBERSHIP_PORT":  strconv.Itoa(ports[5]),
		"TEMPORAL_MATCHING_MEMBERSHIP_PORT": strconv.Itoa(ports[6]),
		"TEMPORAL_WORKER_MEMBERSHIP_PORT":   strconv.Itoa(ports[7]),
		"TEMPORAL_HTTP_PORT":                strconv.Itoa(ports[8]),
	}
	defer dropDatabases(env["TEMPORAL_DB"], env["TEMPORAL_VISIBILITY_DB"])
	defer script("../../scripts/temporal-down.sh", env) //nolint:errcheck // best effort on the way out
	if err := script("../../scripts/temporal-up.sh", env); err != nil {
		return 0, err
	}
	temporalAddr, temporalEnv = "127.0.0.1:"+env["TEMPORAL_PORT"], env
	if err := searchAttributesReady(temporalAddr); err != nil {
		return 0, err
	}
	return m.Run(), nil
}

// searchAttributesReady registers bae-go's search attributes and waits until
// the frontend accepts a workflow start that carries them. baesrv registers
// them itself at startup, but a real server's frontend learns a new
// attribute's mapping only when it next refreshes its namespace cache (about
// 10 s later); a session's first message sent before that fails with
// "Namespace default has no mapping defined for search attribute
// BaeSessionState". Each test starts fresh replicas, so the suite settles
// this once here instead of racing it in every test.
func searchAttributesReady(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(client.Options{HostPort: addr, Namespace: "default"})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: "default", SearchAttributes: sessionclient.SearchAttributes,
	})
	var exists *serviceerror.AlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("add search attributes: %w", err)
	}
	var sa []temporal.SearchAttributeUpdate
	for name := range sessionclient.SearchAttributes {
		sa = append(sa, temporal.NewSearchAttributeKeyKeyword(name).ValueSet("probe"))
	}
	for {
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: "topology-search-attribute-probe", TaskQueue: "topology-probe",
			TypedSearchAttributes: temporal.NewSearchAttributes(sa...),
		}, "probe")
		if err == nil {
			return c.TerminateWorkflow(ctx, run.GetID(), run.GetRunID(), "probe")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("search attributes never became usable: %w", err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func script(path string, env map[string]string) error {
	cmd := exec.Command(path)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// freePorts finds n loopback ports free right now (all held at once, so
// they are distinct). They are drawn below 32768, not from the kernel's
// ephemeral range: Temporal stores membership ports in a PostgreSQL
// smallint.
func freePorts(n int) ([]int, error) {
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			return nil, fmt.Errorf("no %d free ports in 20000-32767", n)
		}
		p := 20000 + rand.IntN(12768)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		defer l.Close()
		ports = append(ports, p)
	}
	return ports, nil
}

func dropDatabases(names ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, testdb.BaseDatabaseURL())
	if err != nil {
		return
	}
	defer c.Close(ctx)
	for _, n := range names {
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+n+" WITH (FORCE)")
	}
}

// temporalClient is a client of the suite's Temporal server for t.
func temporalClient(t *testing.T) client.Client {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: temporalAddr, Namespace: "default"})
	if err != nil {
		t.Fatalf("dial Temporal at %s: %v", temporalAddr, err)
	}
	t.Cleanup(c.Close)
	return c
}
