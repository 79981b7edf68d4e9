package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stocksvc/stocksvc/internal/testenv"
)

// TestServiceOnRedisTopologies runs two replicas of the service, each started as a user would
// (run with STOCKSVC_REDIS_MODE and REDIS_URL), against a Redis Cluster, against Sentinel and
// on Redlock over three nodes (all up, and one down from the start), and sells a product to
// many concurrent buyers through both: exactly the stock is sold.
func TestServiceOnRedisTopologies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mode string
		url  func(t *testing.T) string
	}{
		{"cluster", func(t *testing.T) string {
			addrs := testenv.StartCluster(t, 3).Addrs()
			return "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
		}},
		{"sentinel", func(t *testing.T) string {
			g := testenv.StartSentinelGroup(t)
			addrs := g.SentinelAddrs()
			return "redis://" + addrs[0] + "?master_name=" + g.MasterName + "&addr=" + strings.Join(addrs[1:], "&addr=")
		}},
		{"redlock", func(t *testing.T) string { return redlockURL(t, 3, nil) }},
		// Start-up needs a quorum of nodes, not all of them; and the first node, which keeps
		// the views, being down costs reads their cache, not the sale.
		{"redlock", func(t *testing.T) string { return redlockURL(t, 3, []int{0}) }},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			t.Parallel()
			env := serveEnv(t, "topology:", map[string]string{"STOCKSVC_REDIS_MODE": tt.mode, "REDIS_URL": tt.url(t)})
			token := env["STOCKSVC_ADMIN_TOKEN"]
			replicas := []*instance{startRun(t, env), startRun(t, env)}
			const stock = 20
			id := replicas[0].createProduct(t, token, "topology-"+tt.mode, stock)

			var sold, busy, failures atomic.Int64
			var wg sync.WaitGroup
			var mu sync.Mutex
			var firstFailure string
			for w := range 8 {
				wg.Go(func() {
					for i := range 5 {
						in := replicas[(w+i)%len(replicas)]
						order := map[string]any{"customer_id": fmt.Sprintf("c%d", w), "items": []map[string]any{{"product_id": id, "quantity": 1}}}
						res, err := doRequest(context.Background(), http.DefaultClient, http.MethodPost, in.URL+"/v1/orders", order, nil)
						switch {
						case err == nil && res.Status == http.StatusCreated:
							sold.Add(1)
						case err == nil && res.Status == http.StatusConflict:
						case err == nil && res.Status == http.StatusTooManyRequests && tt.mode == "redlock":
							// A Redlock polls, and polling is not fair: a replica that keeps
							// taking the lock for batch after batch can keep the other's
							// batch out for its whole wait. The buyer is told to retry; the
							// others still buy exactly the stock.
							busy.Add(1)
						default:
							failures.Add(1)
							mu.Lock()
							firstFailure = fmt.Sprintf("%v %d %s", err, res.Status, res.Body)
							mu.Unlock()
						}
					}
				})
			}
			wg.Wait()
			if failures.Load() > 0 {
				t.Fatalf("%d orders failed, e.g. %s", failures.Load(), firstFailure)
			}
			if got := sold.Load(); got != stock {
				t.Errorf("sold %d through %s (%d answered busy), want exactly the stock %d", got, tt.mode, busy.Load(), stock)
			}
			for _, in := range replicas {
				if err := in.stop(t); err != nil {
					t.Errorf("stop: %v", err)
				}
			}
		})
	}
}

// redlockURL starts n redis-servers, kills those at down, and returns a redlock REDIS_URL
// naming them all.
func redlockURL(t *testing.T, n int, down []int) string {
	t.Helper()
	addrs := make([]string, n)
	servers := make([]*testenv.RedisServer, n)
	for i := range addrs {
		servers[i] = testenv.StartRedis(t)
		addrs[i] = servers[i].Addr()
	}
	// Only once every node has its port: a node killed at once would free its port for the
	// next one to be given, and the URL would name one node twice.
	for _, i := range down {
		servers[i].Kill()
	}
	return "redis://" + addrs[0] + "/0?addr=" + strings.Join(addrs[1:], "&addr=")
}
