package benchmarks

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/stocksvc/stocksvc/loadtest/cluster"
)

// The no-pass flood (issue #33, "cheap refusals"): orders of a product sold through a line,
// sent without a pass, by customers with valid tokens. The line refuses them 409 not-admitted
// before anything else an order costs (the token's signature included); the flood must leave
// the sale beside it at least 0.9× of what a flood of GET /healthz does.

const noPassKind = "no-pass"

// linedFloodProduct creates the no-pass flood's product when the flood is among kinds: on
// sale already, with a line that admits one buyer at a time and that nobody joins.
func linedFloodProduct(ctx context.Context, c *cluster.Cluster, kinds []floodKind) (int64, error) {
	if !slices.ContainsFunc(kinds, func(k floodKind) bool { return k.name == noPassKind }) {
		return 0, nil
	}
	var p struct {
		ID int64 `json:"id"`
	}
	err := c.CreateProductWith(ctx, map[string]any{"sku": "FLOOD-LINED-" + strconv.FormatInt(time.Now().UnixNano(), 36), "name": "a lined product",
		"stock": throughputStock, "line": map[string]any{"admit": 1, "admission_for": 60}}, &p)
	if err != nil {
		return 0, fmt.Errorf("the no-pass flood's product: %w", err)
	}
	return p.ID, nil
}

// noPassEnv is the no-pass flood's wrk environment: orders of the lined product, each keyed,
// with the valid tokens of the missing-ids flood's customers and no pass.
func noPassEnv(c floodCredentials, round int) []string {
	return []string{"MODE=order", "PRODUCT=" + strconv.FormatInt(c.lined, 10), fmt.Sprintf("KEYPREFIX=n%d", round), "TOKENS=" + c.missing}
}
