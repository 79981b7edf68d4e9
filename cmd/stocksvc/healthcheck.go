package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// healthcheckTimeout bounds the whole probe. /readyz answers within about a second (its own
// checks are bounded by 1s), so a replica that takes longer is not fit for traffic either.
const healthcheckTimeout = 3 * time.Second

// runHealthcheck asks the replica on this host whether it is ready: GET /readyz on the address
// the service listens on (STOCKSVC_ADDR), for container health checks in an image that has no
// shell, curl or wget. It returns nil when the answer is 200 and an error saying what it got
// otherwise; main turns that into exit status 0 or 1.
func runHealthcheck(ctx context.Context, addr string, stdout io.Writer) error {
	target, err := localURL(addr, "/readyz")
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, healthcheckTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	// A probe must not ride on a kept-alive connection of its own or follow a proxy from the
	// environment: it asks this host, now.
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	res, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: GET %s answered %s", target, res.Status)
	}
	fmt.Fprintf(stdout, "ready: GET %s answered %s\n", target, res.Status)
	return nil
}

// localURL turns a listen address into a URL that reaches it from the same host: an empty or
// unspecified host (":8080", "0.0.0.0:8080", "[::]:8080") is reached through loopback.
func localURL(addr, path string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("listen address %q: %w", addr, err)
	}
	switch ip := net.ParseIP(host); {
	case host == "" || (ip != nil && ip.To4() != nil && ip.IsUnspecified()):
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port) + path, nil
}
