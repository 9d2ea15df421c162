package trigger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/bae-go/bae-go/internal/launcher"
)

// Defaults of baeapi's settings.
const (
	DefaultConfigPath = "/etc/bae/bae-api.toml"
	DefaultAddr       = "0.0.0.0:9090"
	// LoopbackAddr is the default instead of DefaultAddr when no token is
	// set: an open port is reachable from this machine only unless the
	// operator names an address.
	LoopbackAddr            = "127.0.0.1:9090"
	DefaultShutdownTimeout  = 30 * time.Second
	DefaultHeartbeatTimeout = 30 * time.Second
)

// Options configure Run.
type Options struct {
	ConfigPath string
	// Addr from BAE_LAUNCHER_API_ADDR; "" falls back to [server] addr, then
	// DefaultAddr with a token and LoopbackAddr without one.
	Addr            string
	Token           string
	ShutdownTimeout time.Duration
	// StaticDir, when set, is a built single-page app served at / (client
	// routes fall back to its index.html).
	StaticDir string
	// WebApp serves the built-in web app at / (StaticDir wins when both are set).
	WebApp           bool
	HeartbeatTimeout time.Duration
	Client           client.Client
	Logger           *slog.Logger
	Stdout, Stderr   io.Writer
	Lookup           func(string) (string, bool)
	// Listening, when set, is told the bound address.
	Listening func(addr string)
}

// Run serves baeapi until ctx ends, then drains requests for at most
// ShutdownTimeout, kills children still running and returns nil.
func Run(ctx context.Context, o Options) error {
	log := o.Logger
	f, found, err := Load(o.ConfigPath)
	if err != nil {
		return err
	}
	if !found {
		log.Warn("no config file found; starting with zero configured agents", "path", o.ConfigPath)
	} else if len(f.Agents) == 0 {
		log.Warn("config parsed but declares zero agents", "path", o.ConfigPath)
	}
	addr, loopbackOnly := listenAddr(o.Addr, f.Server.Addr, o.Token)
	if o.Token == "" {
		msg := "BAE_LAUNCHER_API_TOKEN is UNSET — every /agents/* trigger route is OPEN (no auth) to anyone who can reach " + addr +
			". Set it, and keep this port behind a TLS-terminating reverse proxy on an internal network."
		if loopbackOnly {
			msg += " Listening on loopback only: set BAE_LAUNCHER_API_TOKEN, or name an address in BAE_LAUNCHER_API_ADDR, to serve other hosts."
		}
		log.Warn(msg, "addr", addr)
	}
	if o.HeartbeatTimeout == 0 {
		o.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	s := &Server{
		byName: make(map[string]*Agent, len(f.Agents)), token: o.Token, client: o.Client,
		taskQueue: "baeapi-" + hostname() + "-" + newHandle(), heartbeat: o.HeartbeatTimeout,
		lookup: o.Lookup, log: log, pending: map[string]*invocation{},
	}
	for i := range f.Agents {
		a := &f.Agents[i]
		s.agents = append(s.agents, a)
		s.byName[a.Name] = a
	}
	switch {
	case o.StaticDir != "":
		s.webapp = staticApp(o.StaticDir)
	case o.WebApp:
		s.webapp = newWebApp(s)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	runner := &launcher.Runner{Stdout: o.Stdout, Stderr: o.Stderr, Logger: log, Prepare: s.Prepare}
	w := worker.New(o.Client, s.taskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(launcher.Launch, workflow.RegisterOptions{Name: launcher.WorkflowName})
	w.RegisterActivityWithOptions(runner.RunAgent, activity.RegisterOptions{Name: launcher.ActivityName})
	if err := w.Start(); err != nil {
		_ = ln.Close()
		return fmt.Errorf("start launch worker: %w", err)
	}
	defer w.Stop()
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("baeapi listening", "addr", ln.Addr().String(), "agents", len(s.agents), "task_queue", s.taskQueue)
	if o.Listening != nil {
		o.Listening(ln.Addr().String())
	}
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: draining requests", "grace", o.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), o.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		log.Warn("shutdown", "err", err)
	}
	// Whatever still runs is killed: closing the connections ends the
	// requests' contexts, and each child goes with its request.
	_ = srv.Close()
	// Wait for them to be reaped, so none outlives baeapi's exit.
	reaped := make(chan struct{})
	go func() { s.children.Wait(); close(reaped) }()
	select {
	case <-reaped:
	case <-time.After(childReapTimeout):
		log.Error("children still running after shutdown", "waited", childReapTimeout.String())
	}
	return nil
}

// listenAddr is where baeapi listens: the address the operator named
// (BAE_LAUNCHER_API_ADDR, then [server] addr), else DefaultAddr, or, with no
// token, LoopbackAddr (loopbackOnly true): an open port is not put on every
// interface unless someone asked for it.
func listenAddr(env, file, token string) (addr string, loopbackOnly bool) {
	switch {
	case env != "":
		return env, false
	case file != "":
		return file, false
	case token == "":
		return LoopbackAddr, true
	}
	return DefaultAddr, false
}

// childReapTimeout bounds the wait for killed children to exit: a child in
// uninterruptible sleep must not hold baeapi up forever.
const childReapTimeout = 10 * time.Second

// staticApp serves dir as a single-page app: a path that is no file gets
// index.html, for the app's own routes.
func staticApp(dir string) http.Handler {
	fs := http.Dir(dir)
	files := http.FileServer(fs)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f, err := fs.Open(r.URL.Path); err == nil {
			st, serr := f.Stat()
			_ = f.Close()
			if serr == nil && !st.IsDir() || r.URL.Path == "/" {
				files.ServeHTTP(w, r)
				return
			}
		}
		http.ServeFile(w, r, dir+"/index.html")
	})
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "host"
	}
	return h
}
