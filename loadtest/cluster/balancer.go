package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// StartBalancer puts another HAProxy, with the deployment's own configuration, in front of
// backends that are not stocksvc replicas (the -throughput benchmark's reference, which answers
// /readyz too), under the deployment's supervisor: its files go to <dir>/<name>. It returns the
// balancer's front port once it answers 200 on /readyz.
func (c *Cluster) StartBalancer(ctx context.Context, name string, backends []int) (int, *Proc, error) {
	dir := filepath.Join(c.Dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, nil, fmt.Errorf("create %s: %w", dir, err)
	}
	ports, err := FreePorts(2)
	if err != nil {
		return 0, nil, err
	}
	p, err := startHAProxy(c.Sup, c.HAProxy, dir, ports[0], ports[1], backends)
	if err != nil {
		return 0, nil, err
	}
	if err := WaitReady(ctx, p, fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[0]), 30*time.Second); err != nil {
		return 0, nil, err
	}
	return ports[0], p, nil
}
