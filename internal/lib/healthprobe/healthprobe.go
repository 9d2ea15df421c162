// Package healthprobe is the container health check the images run: an
// HTTP GET of a local health endpoint, so that an image needs no curl or
// wget beside the program it ships.
package healthprobe

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Timeout bounds one probe: Docker's own health check timeout is the outer
// bound, this one keeps a hung server from holding the probe until then.
const Timeout = 3 * time.Second

// URL is the address of path on the server listening on listenAddr (a
// host:port such as BAE_ADDR): a wildcard or empty host is probed on
// loopback, where the probe runs.
func URL(listenAddr, path string) (string, error) {
	host, port, err := net.SplitHostPort(listenAddr)
	if err != nil {
		return "", fmt.Errorf("listen address %q: %w", listenAddr, err)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port) + path, nil
}

// Check GETs url and succeeds on a 2xx answer.
func Check(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("health check %s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("health check %s: %s", url, resp.Status)
	}
	return nil
}
