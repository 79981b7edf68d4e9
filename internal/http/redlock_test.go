package stockhttp_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/testenv"
)

// TestRedlockOrdersNeedQuorum runs a replica whose product locks are Redlocks over five nodes
// and takes nodes down one by one: with two of them down an order still sells (201); with a
// third down no quorum can be had and the order is answered 503 unavailable, with a
// Retry-After, and sells nothing.
func TestRedlockOrdersNeedQuorum(t *testing.T) {
	t.Parallel()
	needsServers(t) // before its redis-server nodes
	nodes := make([]*testenv.RedisServer, 5)
	for i := range nodes {
		nodes[i] = testenv.StartRedis(t)
	}
	// Three seconds to get a lock: each attempt waits up to the nodes' timeout (500 ms) for the
	// dead ones, and on a loaded CI machine one second left room for too few attempts.
	in := newInstance(t, instanceOptions{redlock: nodes, lockWait: 3 * time.Second})
	id := createProduct(t, in.URL, "redlock", 5)

	nodes[1].Kill()
	nodes[3].Kill()
	wantJSON(t, postOrder(t, in.URL, newOrder("c1", orderItem{id, 1}), nil), http.StatusCreated, nil)

	nodes[4].Kill()
	res := postOrder(t, in.URL, newOrder("c2", orderItem{id, 1}), nil)
	wantProblem(t, res, "unavailable", "/v1/orders")
	wantRetryAfter(t, res)
	if got := audit(t, in.URL, id); got.Sold != 1 || !got.Consistent {
		t.Errorf("audit = %+v, want the one order sold with two nodes down, and nothing more", got)
	}
}
