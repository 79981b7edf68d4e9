package stock

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// stockGaugeProducts bounds stocksvc_product_stock: at most this many products have a series
// (product_id is the product's id), whatever the catalogue holds. A flash sale puts a handful of
// products on sale at once; 20 leaves room for several sales, and keeps a Prometheus server
// scraping many replicas at 20 series each.
const stockGaugeProducts = 20

// stockGaugeEvery is how often, at most, the gauge is read from the store, whatever the scrape
// rate: one query of the listing's (Service.Products, on_sale) on the purchase path's pool,
// which a flood of scrapes must not turn into a flood of queries (as issue #31 found for the
// asynchronous queue's gauges).
const stockGaugeEvery = time.Second

// stockGaugeTimeout bounds one read: a scrape does not wait on a slow Postgres; the gauge
// keeps what it last read.
const stockGaugeTimeout = time.Second

// stockGauge exports stocksvc_product_stock: the units left of each product on sale — its sale
// open or not yet opened, and not ended — the stockGaugeProducts with the lowest ids. A product
// that sells out leaves the store's listing (which lists products with stock left) but stays
// here at 0 while it is among the products this gauge last exported, so that a sale's progress
// ends at 0 rather than at a gap; it goes once its sale ends. Every replica reads the same
// rows, so each exports the same figures (a dashboard takes the max across replicas).
type stockGauge struct {
	desc *prometheus.Desc
	// list is the service's listing of products on sale, set by NewService; nil: no series.
	mu   sync.Mutex
	list func(ctx context.Context, limit int) ([]Product, error)
	now  func() time.Time
	at   time.Time
	last []Product // what the last read exported, in id order
}

func newStockGauge() *stockGauge {
	return &stockGauge{
		desc: prometheus.NewDesc("stocksvc_product_stock",
			"Units left of each product on sale (its sale open or not yet opened, and not ended), for the 20 such products with the lowest ids (product_id); a product sold out stays at 0 until its sale ends. Read from Postgres at most once a second; the last figures when Postgres did not answer within a second. Every replica exports the same figures.",
			[]string{"product_id"}, nil),
		now: time.Now,
	}
}

// use makes the gauge read the products on sale with list.
func (g *stockGauge) use(list func(ctx context.Context, limit int) ([]Product, error)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.list = list
}

func (g *stockGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *stockGauge) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	if g.list != nil && (g.at.IsZero() || g.now().Sub(g.at) >= stockGaugeEvery) {
		g.read()
	}
	last := g.last
	g.mu.Unlock()
	for _, p := range last {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(p.Stock), strconv.FormatInt(p.ID, 10))
	}
}

// read replaces g.last with the products on sale now, keeping at 0 those it exported before
// that have left the listing with their sale not ended. g.mu is held.
func (g *stockGauge) read() {
	ctx, cancel := context.WithTimeout(context.Background(), stockGaugeTimeout)
	defer cancel()
	now := g.now()
	on, err := g.list(ctx, stockGaugeProducts)
	if err != nil {
		return // the last figures stand; the next scrape tries again
	}
	g.at = now
	g.last = stockLeft(g.last, on, now)
}

// stockLeft merges the products on sale now (on, in id order) with those exported before
// (last): one that left the listing is kept, at 0 units, unless its sale has ended by now
// (the listing drops a product sold out, or ended). At most stockGaugeProducts, lowest ids
// first, are returned.
func stockLeft(last, on []Product, now time.Time) []Product {
	listed := make(map[int64]bool, len(on))
	out := make([]Product, 0, stockGaugeProducts)
	out = append(out, on...)
	for _, p := range on {
		listed[p.ID] = true
	}
	for _, p := range last {
		if listed[p.ID] || p.SaleEndsAt != nil && !now.Before(*p.SaleEndsAt) {
			continue
		}
		p.Stock = 0
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Product) int { return cmp.Compare(a.ID, b.ID) })
	if len(out) > stockGaugeProducts {
		out = out[:stockGaugeProducts]
	}
	return out
}
