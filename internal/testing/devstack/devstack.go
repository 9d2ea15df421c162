// Package devstack runs a complete Temporal development server inside the
// current process, the way `temporal server start-dev` does: all four
// services (frontend, history, matching, worker) on loopback, SQLite
// persistence (a file under DataDir, or memory), one pre-registered
// namespace with the custom search attributes bae needs, and optionally the
// Temporal Web UI.
//
// It exists so that `baesrv dev` works with nothing but PostgreSQL. It is for
// development only: production deployments point baesrv at an external
// Temporal cluster.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/membership/static"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/primitives"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/temporal"
)

// Defaults match `temporal server start-dev`, so existing tooling (the
// temporal CLI, SDK defaults) finds the server without flags.
const (
	DefaultIP           = "127.0.0.1"
	DefaultFrontendPort = 7233
	DefaultUIPort       = 8233
	DefaultNamespace    = "default"

	// DBFileName is the SQLite file created inside Options.DataDir.
	DBFileName = "temporal.db"

	clusterName   = "active"
	loopback      = "127.0.0.1"
	readyTimeout  = 30 * time.Second
	pollInterval  = 50 * time.Millisecond
	dialTimeout   = 2 * time.Second
	uiReadyWithin = 5 * time.Second
)

// Options configure Start. The zero value is a usable in-memory server on the
// default ports.
type Options struct {
	// DataDir holds the SQLite file (<DataDir>/temporal.db); it is created if
	// missing. "" keeps everything in memory, lost on Stop.
	DataDir string
	// IP the frontend and UI listen on; default 127.0.0.1. The internal
	// services always stay on loopback.
	IP string
	// FrontendPort is the gRPC frontend port; 0 means 7233.
	FrontendPort int
	// UIPort is the Web UI port; 0 means 8233, a negative value disables the UI.
	UIPort int
	// Namespace is registered at startup; default "default".
	Namespace string
	// Logger receives devstack messages and the server's warnings and errors
	// (its info chatter is dropped). nil discards everything.
	Logger *slog.Logger
	// SearchAttributes are custom search attributes registered on Namespace,
	// e.g. {"BaeProfileId": INDEXED_VALUE_TYPE_KEYWORD}.
	SearchAttributes map[string]enumspb.IndexedValueType
}

// Server is a running development server. Its methods are safe for
// concurrent use.
type Server struct {
	temporal     temporal.Server
	ui           *uiServer // nil when disabled or failed
	frontendAddr string
	namespace    string
	log          *slog.Logger
	serverLevel  *slog.LevelVar

	stopOnce sync.Once
	stopErr  error
}

// Start launches the server and returns once the frontend answers health
// checks, the namespace is usable and the search attributes are registered.
// ctx bounds startup only; the server runs until Stop.
func Start(ctx context.Context, opts Options) (*Server, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	reachIP := dialableIP(opts.IP)
	frontendAddr := net.JoinHostPort(reachIP, strconv.Itoa(opts.FrontendPort))

	// The server's listeners report bind failures through Logger.Fatal and then
	// carry on with a nil listener, so a busy port must be caught up front.
	if err := checkFree(net.JoinHostPort(opts.IP, strconv.Itoa(opts.FrontendPort))); err != nil {
		return nil, fmt.Errorf("devstack: temporal frontend port: %w", err)
	}
	internalPorts, err := freePorts(loopback, 3)
	if err != nil {
		return nil, fmt.Errorf("devstack: pick internal ports: %w", err)
	}
	// An HTTP port enables the frontend's HTTP API (and Nexus); without one
	// the server warns on every start.
	httpPort, err := freePorts(opts.IP, 1)
	if err != nil {
		return nil, fmt.Errorf("devstack: pick frontend http port: %w", err)
	}

	sqlCfg, err := prepareStore(opts)
	if err != nil {
		return nil, err
	}

	cfg := buildConfig(opts, reachIP, internalPorts, httpPort[0], sqlCfg)
	serverLevel := new(slog.LevelVar)
	serverLevel.Set(slog.LevelWarn)
	srv, err := newTemporal(cfg, reachIP, opts.FrontendPort, internalPorts, newServerLogger(log, serverLevel))
	if err != nil {
		return nil, err
	}
	started := time.Now()
	if err := srv.Start(); err != nil {
		_ = srv.Stop()
		return nil, fmt.Errorf("devstack: start temporal: %w", err)
	}

	s := &Server{temporal: srv, frontendAddr: frontendAddr, namespace: opts.Namespace, log: log, serverLevel: serverLevel}
	if err := s.awaitReady(ctx, opts.SearchAttributes); err != nil {
		_ = s.Stop()
		return nil, err
	}
	log.Info("temporal dev server ready",
		"frontend", frontendAddr, "namespace", opts.Namespace,
		"db", sqlCfg.DatabaseName, "startup", time.Since(started).Round(time.Millisecond))

	if opts.UIPort > 0 {
		// The UI is a convenience: failing to start it must not stop bae.
		ui, err := startUI(ctx, opts.IP, opts.UIPort, frontendAddr, opts.Namespace)
		if err != nil {
			log.Warn("temporal web ui not started", "error", err)
		} else {
			s.ui = ui
		}
	}
	return s, nil
}

// FrontendAddr is the host:port SDK clients dial.
func (s *Server) FrontendAddr() string { return s.frontendAddr }

// UIAddr is the Web UI's host:port, or "" when the UI is disabled or failed.
func (s *Server) UIAddr() string {
	if s.ui == nil {
		return ""
	}
	return s.ui.addr
}

// Namespace is the registered namespace.
func (s *Server) Namespace() string { return s.namespace }

// Stop shuts the UI and the server down, waiting for in-flight work to drain.
// Calling it again returns the first result.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		var errs []error
		if s.ui != nil {
			errs = append(errs, s.ui.stop())
		}
		// Shutdown cancels every long poll and background task, each of which
		// logs a warning or error; none of them is news to the caller.
		s.serverLevel.Set(levelSilent)
		if err := s.temporal.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("devstack: stop temporal: %w", err))
		}
		s.stopErr = errors.Join(errs...)
		s.log.Info("temporal dev server stopped", "frontend", s.frontendAddr)
	})
	return s.stopErr
}

func (o Options) withDefaults() (Options, error) {
	if o.IP == "" {
		o.IP = DefaultIP
	}
	if net.ParseIP(o.IP) == nil {
		return o, fmt.Errorf("devstack: invalid IP %q", o.IP)
	}
	if o.FrontendPort == 0 {
		o.FrontendPort = DefaultFrontendPort
	}
	if o.UIPort == 0 {
		o.UIPort = DefaultUIPort
	}
	if o.FrontendPort < 0 || o.FrontendPort > 65535 || o.UIPort > 65535 {
		return o, fmt.Errorf("devstack: port out of range (frontend %d, ui %d)", o.FrontendPort, o.UIPort)
	}
	if o.UIPort == o.FrontendPort {
		return o, fmt.Errorf("devstack: frontend and UI ports are both %d", o.UIPort)
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// prepareStore creates the SQLite schema on first use and pre-registers the
// namespace directly in the database: registering through the frontend would
// mean waiting for the namespace cache before workflows can start.
func prepareStore(opts Options) (*config.SQL, error) {
	sqlCfg := &config.SQL{PluginName: sqliteplugin.PluginName}
	if opts.DataDir == "" {
		// The plugin creates the schema itself for memory databases. A random
		// name keeps two in-memory servers in one process apart, since the
		// plugin shares connections by DSN.
		sqlCfg.DatabaseName = "devstack-" + strconv.FormatUint(rand.Uint64(), 36)
		sqlCfg.ConnectAttributes = map[string]string{"mode": "memory", "cache": "shared"}
	} else {
		if err := os.MkdirAll(opts.DataDir, 0o755); err != nil {
			return nil, fmt.Errorf("devstack: create data dir: %w", err)
		}
		sqlCfg.DatabaseName = filepath.Join(opts.DataDir, DBFileName)
		sqlCfg.ConnectAttributes = map[string]string{"mode": "rwc"}
		if _, err := os.Stat(sqlCfg.DatabaseName); errors.Is(err, os.ErrNotExist) {
			if err := sqliteschema.SetupSchema(sqlCfg); err != nil {
				// Leave no half-initialised file behind: it would never be set up again.
				_ = os.Remove(sqlCfg.DatabaseName)
				return nil, fmt.Errorf("devstack: set up sqlite schema in %s: %w", sqlCfg.DatabaseName, err)
			}
		} else if err != nil {
			return nil, fmt.Errorf("devstack: stat %s: %w", sqlCfg.DatabaseName, err)
		}
	}

	ns, err := sqliteschema.NewNamespaceConfig(clusterName, opts.Namespace, false, opts.SearchAttributes)
	if err != nil {
		return nil, fmt.Errorf("devstack: namespace config: %w", err)
	}
	// A no-op when the namespace survives from an earlier run.
	if err := sqliteschema.CreateNamespaces(sqlCfg, ns); err != nil {
		return nil, fmt.Errorf("devstack: register namespace %q: %w", opts.Namespace, err)
	}
	return sqlCfg, nil
}

// internal service order in the ports slice.
const (
	historyIdx = iota
	matchingIdx
	workerIdx
)

func buildConfig(opts Options, reachIP string, ports []int, httpPort int, sqlCfg *config.SQL) *config.Config {
	frontendAddr := net.JoinHostPort(reachIP, strconv.Itoa(opts.FrontendPort))
	internal := func(port int) config.Service {
		return config.Service{RPC: config.RPC{GRPCPort: port, BindOnIP: loopback}}
	}

	var cfg config.Config
	cfg.Global.Membership.MaxJoinDuration = 30 * time.Second
	cfg.Global.Membership.BroadcastAddress = loopback
	// No Global.Metrics and no PProf port: neither listens, keeping ports and
	// memory down.
	cfg.Persistence = config.Persistence{
		DefaultStore:     "sqlite",
		VisibilityStore:  "sqlite",
		NumHistoryShards: 1, // one shard is plenty for a laptop and starts fastest
		DataStores:       map[string]config.DataStore{"sqlite": {SQL: sqlCfg}},
	}
	cfg.ClusterMetadata = &cluster.Config{
		FailoverVersionIncrement: 10,
		MasterClusterName:        clusterName,
		CurrentClusterName:       clusterName,
		ClusterInformation: map[string]cluster.ClusterInformation{
			clusterName: {
				Enabled: true, InitialFailoverVersion: 1, RPCAddress: frontendAddr,
				HTTPAddress: net.JoinHostPort(reachIP, strconv.Itoa(httpPort)),
			},
		},
	}
	cfg.DCRedirectionPolicy.Policy = "noop"
	cfg.Services = map[string]config.Service{
		string(primitives.FrontendService): {RPC: config.RPC{GRPCPort: opts.FrontendPort, HTTPPort: httpPort, BindOnIP: opts.IP}},
		string(primitives.HistoryService):  internal(ports[historyIdx]),
		string(primitives.MatchingService): internal(ports[matchingIdx]),
		string(primitives.WorkerService):   internal(ports[workerIdx]),
	}
	cfg.Archival.History.State = "disabled"
	cfg.Archival.Visibility.State = "disabled"
	cfg.NamespaceDefaults.Archival.History.State = "disabled"
	cfg.NamespaceDefaults.Archival.Visibility.State = "disabled"
	// The worker service (schedules, batch, ...) talks to the frontend through this.
	cfg.PublicClient.HostPort = frontendAddr
	return &cfg
}

func newTemporal(cfg *config.Config, reachIP string, frontendPort int, ports []int, tlog serverLogger) (temporal.Server, error) {
	authorizer, err := authorization.GetAuthorizerFromConfig(&cfg.Global.Authorization)
	if err != nil {
		return nil, fmt.Errorf("devstack: authorizer: %w", err)
	}
	claimMapper, err := authorization.GetClaimMapperFromConfig(&cfg.Global.Authorization, tlog)
	if err != nil {
		return nil, fmt.Errorf("devstack: claim mapper: %w", err)
	}
	host := func(ip string, port int) static.Hosts {
		return static.SingleLocalHost(net.JoinHostPort(ip, strconv.Itoa(port)))
	}
	srv, err := temporal.NewServer(
		temporal.WithConfig(cfg),
		temporal.ForServices(temporal.DefaultServices),
		// Static membership: a single process needs no ringpop gossip, which
		// also saves the membership ports and join delay.
		temporal.WithStaticHosts(map[primitives.ServiceName]static.Hosts{
			primitives.FrontendService: host(reachIP, frontendPort),
			primitives.HistoryService:  host(loopback, ports[historyIdx]),
			primitives.MatchingService: host(loopback, ports[matchingIdx]),
			primitives.WorkerService:   host(loopback, ports[workerIdx]),
		}),
		temporal.WithLogger(tlog),
		temporal.WithAuthorizer(authorizer),
		temporal.WithClaimMapper(func(*config.Config) authorization.ClaimMapper { return claimMapper }),
		temporal.WithDynamicConfigClient(devDynamicConfig()),
	)
	if err != nil {
		return nil, fmt.Errorf("devstack: create temporal server: %w", err)
	}
	return srv, nil
}

// devDynamicConfig trades production safety margins for a small footprint and
// a UI that does not hit rate limits while browsing.
func devDynamicConfig() dynamicconfig.StaticClient {
	return dynamicconfig.StaticClient{
		dynamicconfig.HistoryCacheHostLevelMaxSize.Key():                 8192,
		dynamicconfig.FrontendMaxNamespaceVisibilityRPSPerInstance.Key(): 100,
		// Each queued sendMessage is an in-flight update; the stock limit
		// of 10 per workflow would make an 11th driver retry out of order.
		dynamicconfig.WorkflowExecutionMaxInFlightUpdates.Key(): 1000,
		// With one shard the stock 20 polls/s throttles the transfer queue:
		// every activity completion waited ~30 ms for its next task.
		dynamicconfig.TransferProcessorMaxPollRPS.Key(): 10000,
	}
}

// awaitReady polls until the frontend serves the namespace, then makes sure
// the custom search attributes exist (a namespace surviving from an earlier
// run may predate some of them).
func (s *Server) awaitReady(ctx context.Context, attrs map[string]enumspb.IndexedValueType) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()

	var c client.Client
	var lastErr error
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for c == nil {
		c, lastErr = s.tryDial(ctx)
		if c != nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devstack: temporal frontend %s not ready: %w (last error: %v)", s.frontendAddr, ctx.Err(), lastErr)
		case <-tick.C:
		}
	}
	defer c.Close()
	if err := registerSearchAttributes(ctx, c, s.namespace, attrs); err != nil {
		return err
	}
	return nil
}

// tryDial returns a client once the frontend is healthy and knows the
// namespace, or the reason it is not there yet.
func (s *Server) tryDial(ctx context.Context) (client.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	c, err := client.DialContext(dctx, client.Options{
		HostPort:  s.frontendAddr,
		Namespace: s.namespace,
		Logger:    sdklog.NewStructuredLogger(s.log.With("component", "devstack-client")),
	})
	if err != nil {
		return nil, err
	}
	if _, err := c.CheckHealth(dctx, &client.CheckHealthRequest{}); err != nil {
		c.Close()
		return nil, err
	}
	if _, err := c.WorkflowService().DescribeNamespace(dctx, &workflowservice.DescribeNamespaceRequest{Namespace: s.namespace}); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// registerSearchAttributes adds only the missing attributes, so restarts do
// not make the server log "already exists" warnings.
func registerSearchAttributes(ctx context.Context, c client.Client, ns string, attrs map[string]enumspb.IndexedValueType) error {
	if len(attrs) == 0 {
		return nil
	}
	list, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
	if err != nil {
		return fmt.Errorf("devstack: list search attributes: %w", err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for name, typ := range attrs {
		have, ok := list.GetCustomAttributes()[name]
		switch {
		case !ok:
			missing[name] = typ
		case have != typ:
			return fmt.Errorf("devstack: search attribute %s is %s, want %s", name, have, typ)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if _, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: ns, SearchAttributes: missing,
	}); err != nil {
		return fmt.Errorf("devstack: add search attributes: %w", err)
	}
	return nil
}

// dialableIP maps a wildcard listen address to loopback, which is what local
// clients and the server's own services must dial.
func dialableIP(ip string) string {
	if p := net.ParseIP(ip); p != nil && p.IsUnspecified() {
		return loopback
	}
	return ip
}

func checkFree(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s is not available (already in use?): %w", addr, err)
	}
	return l.Close()
}

// freePorts picks n ports on ip that are free now, for the server to bind
// a moment later. They come from below every common ephemeral range (Linux
// hands out 32768 and up, macOS and Windows 49152 and up): a port the
// kernel picked (bind to 0) can be handed to any process's outgoing
// connection in between, and the server then runs a service with no
// listener and crashes on it. Every listener is held until all n are
// chosen, so no port is picked twice.
func freePorts(ip string, n int) ([]int, error) {
	const lo, hi = 20000, 32768
	ports := make([]int, 0, n)
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries == 1000 {
			return nil, fmt.Errorf("devstack: no free port between %d and %d on %s", lo, hi, ip)
		}
		l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(lo+rand.IntN(hi-lo))))
		if err != nil {
			continue // taken
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
