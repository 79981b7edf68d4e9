package cluster

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"
)

// WaitReady polls url until it answers 200, the process exits, or timeout passes.
func WaitReady(ctx context.Context, p *Proc, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready (%v); the end of %s:\n%s", p.Name, p.err, p.Log, p.tail(tailLines))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s within %v; see %s", p.Name, url, timeout, p.Log)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// FreePorts asks the kernel for n free loopback ports.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Redact is raw with its password hidden, for messages.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// WithHost is the URL raw with its host:port replaced by host.
func WithHost(raw, host string) string {
	u, _ := url.Parse(raw)
	u.Host = host
	return u.String()
}
