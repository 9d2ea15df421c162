package app

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/bae-go/bae-go/api"
	"github.com/bae-go/bae-go/console"
	"github.com/bae-go/bae-go/internal/config"
)

// consoleServer is the operator console's listener, when BAE_CONSOLE_ADDR
// turns it on.
type consoleServer struct {
	srv          *http.Server
	ln           net.Listener
	url          string
	passwordFile string
	stopStreams  context.CancelFunc
}

// startConsole binds the console. It reaches the admin API through the
// admin router in process, without admin authentication: that handler is
// never bound to a port, and the console's own login guards it.
func startConsole(ctx context.Context, cfg config.Server, parts *Parts, deployment string, log *slog.Logger) (*consoleServer, error) {
	cc := cfg.Console
	if !cc.Enabled() {
		return nil, nil
	}
	password, err := console.LoadPassword(cc, log)
	if err != nil {
		return nil, err
	}
	con, err := console.New(console.Options{
		Store: parts.Store, Hub: parts.Hub, Log: log,
		Admin:    api.AdminRouter(parts.Deps, nil, parts.Sandbox),
		Password: password, Salt: deployment, Secure: cc.Secure(), SessionTTL: cc.SessionTTL,
		TemporalUIURL: cc.TemporalUIURL, Namespace: cfg.TemporalNamespace, Temporal: parts.Temporal,
		Version: Version,
	})
	if err != nil {
		return nil, err
	}
	tlsCfg, err := cc.TLSConfig() // checked by Check before anything started
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cc.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on BAE_CONSOLE_ADDR %s: %w", cc.Addr, err)
	}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	// Streams run on a context cancelled at shutdown, since they only end
	// when the browser leaves.
	streams, stop := context.WithCancel(context.WithoutCancel(ctx))
	srv := &http.Server{
		Handler: con, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return streams },
	}
	scheme := "http"
	if cc.TLSCert != "" {
		scheme = "https"
	}
	pwFile := cc.PasswordFile
	if cc.Password != "" {
		pwFile = "(BAE_CONSOLE_PASSWORD)"
	}
	return &consoleServer{srv: srv, ln: ln, url: scheme + "://" + ln.Addr().String(), passwordFile: pwFile, stopStreams: stop}, nil
}
