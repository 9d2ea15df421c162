package devstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	uioptions "github.com/temporalio/ui-server/v2/server/server_options"
)

// uiServer is the Temporal Web UI (assets embedded in the ui-server module)
// proxying to the dev frontend.
type uiServer struct {
	srv  *uiserver.Server
	addr string        // dialable host:port
	done chan struct{} // closed when srv.Start returns
}

// startUI returns once the UI answers its health route.
//
// ui-server's Start blocks and calls os.Exit (echo's Logger.Fatal) when it
// cannot bind, so the port is checked first; only a race with another
// process grabbing it in between remains.
func startUI(ctx context.Context, ip string, port int, frontendAddr, namespace string) (_ *uiServer, err error) {
	listen := net.JoinHostPort(ip, strconv.Itoa(port))
	if err := checkFree(listen); err != nil {
		return nil, fmt.Errorf("ui port: %w", err)
	}

	host := ip
	if strings.Contains(ip, ":") {
		host = "[" + ip + "]" // ui-server builds the address as host:port itself
	}
	// NewServer panics on bad config or missing assets; the UI is optional.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("create ui server: %v", r)
		}
	}()
	srv := uiserver.NewServer(uioptions.WithConfigProvider(&uiconfig.Config{
		Host:                host,
		Port:                port,
		TemporalGRPCAddress: frontendAddr,
		EnableUI:            true,
		DefaultNamespace:    namespace,
		// Plain-HTTP loopback: secure cookies would never be sent back.
		CORS:             uiconfig.CORS{CookieInsecure: true},
		HideLogs:         true,
		DisableNewsFetch: true, // no outbound traffic from a dev tool
	}))

	u := &uiServer{
		srv:  srv,
		addr: net.JoinHostPort(dialableIP(ip), strconv.Itoa(port)),
		done: make(chan struct{}),
	}
	go func() {
		defer close(u.done)
		_ = srv.Start() // returns nil once stopped; bind errors never get here
	}()
	if err := u.awaitReady(ctx); err != nil {
		_ = u.stop()
		return nil, err
	}
	return u, nil
}

func (u *uiServer) awaitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, uiReadyWithin)
	defer cancel()
	hc := &http.Client{Timeout: time.Second}
	url := "http://" + u.addr + "/healthz"
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var lastErr error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("ui health request: %w", err)
		}
		resp, err := hc.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("ui at %s not ready: %w (last error: %v)", u.addr, ctx.Err(), lastErr)
		case <-u.done:
			return errors.New("ui server exited during startup")
		case <-tick.C:
		}
	}
}

// stop closes the listener and waits for the serving goroutine to finish.
func (u *uiServer) stop() error {
	u.srv.Stop()
	select {
	case <-u.done:
		return nil
	case <-time.After(5 * time.Second):
		return errors.New("devstack: ui server did not stop within 5s")
	}
}
