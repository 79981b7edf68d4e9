package stock

import (
	"context"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// ProductView is a product as a read saw it, and how fresh that is.
type ProductView struct {
	Product
	// Read is when the Postgres read (or the committed write) the view reflects happened.
	Read time.Time
	// From says where the view came from: FromProcess, FromRedis or FromPostgres.
	From string
}

// Where a product view came from (ProductView.From), as responses and metrics report it.
const (
	FromProcess  = "process"  // a replica's lease on a view it read from Redis
	FromRedis    = "redis"    // the view in Redis
	FromPostgres = "postgres" // read from Postgres for this request (or its flight)
)

// Views is a cache of products' views (package view implements it): the Service answers
// product reads from it, asks it whether an order can be refused at once — its product does not
// exist, or is sold out — before queueing the order, keeps it current with every purchase, and
// tells it before every write that may raise a stock and after every creation.
type Views interface {
	// Product returns product id's view. Errors: *ProductNotFoundError, ErrUnavailable, the
	// context's error.
	Product(ctx context.Context, id int64) (ProductView, error)
	// Refusal reports what the views know that refuses an order for product id before it is
	// queued, and the product's sale rules when they know them; the zero Refusal when they
	// cannot tell.
	Refusal(ctx context.Context, id int64) Refusal
	// Writing is told, before a purchase's write w is made, which products' views it will
	// move, so that the views cannot serve the level before it for long if Committed is never
	// told (the replica dies, or loses the views' store, in between). Errors: ErrUnavailable
	// (the views could not be told: the write must not be made), the context's error.
	Writing(ctx context.Context, w Write) error
	// Committed records that a purchase left product id at stock left and version version;
	// it returns once the views have taken it, or have given up after a short wait.
	Committed(id int64, left, version int64, at time.Time)
	// Raise prepares product id for a write that may raise its stock; done must be called
	// after the write with the product as it left it, or nil when the write failed or its
	// outcome is unknown. Errors: ErrUnavailable (nothing may be written), the context's error.
	Raise(ctx context.Context, id int64) (done func(p *Product), err error)
	// Created is told that product id's insert has committed, and returns once no replica
	// can say the product does not exist to a Product or Refusal call that begins after it
	// returned. The Service calls it before it answers the creation.
	Created(id int64)
}

// Refusal is what the views know of a product that refuses an order for it at once, with no
// queue, no lock and no query. At most one of Missing and SoldOut is set.
type Refusal struct {
	// Missing says that no product has the id: a Postgres read that began at most one lease
	// before the call found none. A product whose creation has been answered is never missing
	// (Views.Created).
	Missing bool
	// SoldOut says that the product has no stock left, from a view that is never above the
	// stock in Postgres and never from before a raise that has returned. Version is the
	// view's, whenever Sale is set or SoldOut is true.
	SoldOut bool
	Version int64
	// Sale is the product's sale rules when Known, from a view that is never from before a
	// change of the rules that has returned (Service.UpdateSale raises the views). (A value
	// and a flag rather than a pointer: a refusal is asked for on every order, and a pointer
	// would cost each one an allocation.)
	Sale  SaleRules
	Known bool
}

// maxStoredKeys bounds the idempotency keys a replica holds for one sold-out product. A flash
// sale stores far fewer; a product with more keyed outcomes within the retention than this has
// its keyed orders decided by the purchase path, as before the cache.
const maxStoredKeys = 100_000

// storedKeys knows, per sold-out product, the idempotency keys with a stored outcome for it — a
// confirmed order (to replay, never to refuse: that would lose the order) or a refusal (to
// replay exactly) — so that a keyed order for a sold-out product can be refused without a
// query when its key has neither. Once a product is sold out at some version, nothing can be
// confirmed for it until a restock moves the version, so the confirmed keys loaded for that
// version stay complete for as long as it is the view's. Refusals stored after the load (by
// the purchase path, deciding while the stock was 0) say what a refusal from the view says.
type storedKeys struct {
	store   Store
	metrics *Metrics
	flight  singleflight.Group

	mu   sync.Mutex
	sets map[int64]*keySet
}

type keySet struct {
	version  int64
	keys     map[RecordKey]struct{} // nil: too many to hold
	lastUsed time.Time
}

// maxKeySets is how many products' key sets a replica keeps before it forgets the idle ones.
const maxKeySets = 1024

// unclaimed reports whether key has no stored outcome for product id, the product being sold
// out — or its sale closed, which also confirms nothing — at version. ok is false when that cannot be told without going to the purchase path (the
// keys could not be loaded, or there are too many).
func (c *storedKeys) unclaimed(ctx context.Context, id, version int64, key RecordKey) (unclaimed, ok bool) {
	set, err := c.set(ctx, id, version)
	if err != nil || set.keys == nil {
		return false, false
	}
	_, claimed := set.keys[key]
	return !claimed, true
}

func (c *storedKeys) set(ctx context.Context, id, version int64) (*keySet, error) {
	now := time.Now()
	c.mu.Lock()
	if s, ok := c.sets[id]; ok && s.version == version {
		s.lastUsed = now
		c.mu.Unlock()
		return s, nil
	}
	c.mu.Unlock()
	v, err, _ := c.flight.Do(strconv.FormatInt(id, 10)+"@"+strconv.FormatInt(version, 10), func() (any, error) {
		// The load serves every caller that joins it: it must not end with the first one.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		c.metrics.keySetLoaded()
		keys, err := c.store.StoredKeys(ctx, id, maxStoredKeys+1)
		if err != nil {
			return nil, err
		}
		s := &keySet{version: version, lastUsed: now}
		if len(keys) <= maxStoredKeys {
			s.keys = make(map[RecordKey]struct{}, len(keys))
			for _, k := range keys {
				s.keys[k] = struct{}{}
			}
		}
		c.keep(id, s)
		return s, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*keySet), nil
}

func (c *storedKeys) keep(id int64, s *keySet) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sets == nil {
		c.sets = map[int64]*keySet{}
	}
	if old, ok := c.sets[id]; ok && old.version > s.version {
		return
	}
	c.sets[id] = s
	if len(c.sets) > maxKeySets {
		cutoff := time.Now().Add(-time.Minute)
		for k, x := range c.sets {
			if x.lastUsed.Before(cutoff) {
				delete(c.sets, k)
			}
		}
	}
}
