package traffic

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/stocksvc/stocksvc/internal/clock"
	"github.com/stocksvc/stocksvc/loadtest/client"
)

// Mix is a drill's traffic: operations arrive at a rate (open loop: a slow service does not
// slow the arrivals), on two products — a hot one whose stock outlasts the fault, and a scarce
// one that sells out again and again and is restocked all along, so that "sold out" must be
// un-said in time — and, when set, a product with sale rules ordered by customers who come
// back, and a product sold with holds.
type Mix struct {
	Client  *client.Client
	Rand    *Rand
	Rate    float64 // operations/s at factor 1
	MaxOpen int64   // arrivals beyond this many open operations are dropped
	Hot     int64
	Scarce  int64
	// Limited, when not 0, is ordered by LimitedCustomer, 1 to LimitedMax units at a time.
	Limited         int64
	LimitedCustomer func() string
	LimitedMax      int
	// Holds, when not 0, is bought by HoldBuyer (who pays, cancels or walks away) and read.
	Holds     int64
	HoldBuyer func(ctx context.Context)

	factor  atomic.Int64 // the arrival rate's multiplier, in thousandths (a burst)
	dropped atomic.Int64 // arrivals not sent because too many operations were open
	open    atomic.Int64
}

// SetFactor multiplies the arrival rate by f (1 until set otherwise).
func (m *Mix) SetFactor(f float64) { m.factor.Store(int64(f * 1000)) }

// Dropped is how many arrivals were not sent because too many operations were open.
func (m *Mix) Dropped() int64 { return m.dropped.Load() }

// Run makes arrivals until ctx ends.
func (m *Mix) Run(ctx context.Context) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	last := time.Now()
	credit := 0.0
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			credit += now.Sub(last).Seconds() * m.Rate * float64(m.factor.Load()) / 1000
			last = now
			for ; credit >= 1; credit-- {
				if m.open.Load() >= m.MaxOpen {
					m.dropped.Add(1)
					continue
				}
				m.one(ctx)
			}
		}
	}
}

// one sends one operation: 45% orders for the hot product, 30% for the scarce one, 25% reads
// of both. Beside closed-loop buyers the hot product's stock moves by dozens of concurrent
// orders at a time; the model checks each batch of them as one operation (model.History), so
// reads of it stay within Porcupine's reach.
func (m *Mix) one(ctx context.Context) {
	rolls := 100
	if m.Limited != 0 {
		rolls = 120 // a fifth more: orders of the limited product
	}
	if m.Holds != 0 {
		rolls += 25 // a fifth more: buyers of the holds product (20) and reads of it (5)
	}
	roll := m.Rand.IntN(rolls)
	limitedEnd := 100
	if m.Limited != 0 {
		limitedEnd = 120
	}
	m.open.Add(1)
	m.Client.Go(func() {
		defer m.open.Add(-1)
		// The operation outlives the load's context: it runs to its answer (or its budget).
		ctx := context.WithoutCancel(ctx)
		switch {
		case roll < 45:
			m.Client.Order(ctx, m.Hot, int64(1+m.Rand.IntN(3)))
		case roll < 75:
			m.Client.Order(ctx, m.Scarce, int64(1+m.Rand.IntN(2)))
		case roll < 88:
			m.Client.Read(ctx, m.Hot)
		case roll < 100:
			m.Client.Read(ctx, m.Scarce)
		case roll < limitedEnd:
			m.Client.OrderAs(ctx, m.LimitedCustomer(), m.Limited, int64(1+m.Rand.IntN(m.LimitedMax)))
		case roll < limitedEnd+20:
			m.HoldBuyer(ctx)
		default:
			m.Client.Read(ctx, m.Holds)
		}
	})
}

// Restock restocks the scarce product every 400–800 ms and the hot one every 4 s, one
// restock at a time, until ctx ends.
func (m *Mix) Restock(ctx context.Context) {
	nextHot := time.Now().Add(4 * time.Second)
	for {
		if clock.Sleep(ctx, m.Rand.Between(400*time.Millisecond, 800*time.Millisecond)) != nil {
			return
		}
		bg := context.WithoutCancel(ctx)
		m.Client.Restock(bg, m.Scarce, int64(1+m.Rand.IntN(3)))
		if m.Holds != 0 && m.Rand.IntN(2) == 0 {
			// Paid holds take units for good: a restock now and then keeps the product
			// selling, and its stock moving both ways.
			m.Client.Restock(bg, m.Holds, int64(1+m.Rand.IntN(2)))
		}
		if time.Now().After(nextHot) {
			m.Client.Restock(bg, m.Hot, 10)
			nextHot = time.Now().Add(4 * time.Second)
		}
	}
}

// Rush runs n closed-loop buyers of product until ctx ends, each an operation of c (so that
// c.Wait waits for the last orders).
func Rush(ctx context.Context, c *client.Client, product int64, n int) {
	for range n {
		c.Go(func() {
			for ctx.Err() == nil {
				// An order runs to its answer (or its budget) even when the load stops.
				c.Buy(context.WithoutCancel(ctx), product)
			}
		})
	}
}
