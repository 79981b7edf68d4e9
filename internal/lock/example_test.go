package lock_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/lock"
)

// exampleName returns a lock name no other run shares. Real names are stable, like
// "lock:product:{42}"; the braces are a Redis Cluster hash tag that keeps the lock and its
// fencing counter in one slot.
func exampleName(id string) string {
	return "stocksvc-test:example-" + rand.Text() + ":lock:product:{" + id + "}"
}

func ExampleClient_Obtain() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	locker := lock.New(rdb)
	name := exampleName("42")
	defer rdb.Del(context.Background(), name+":fence") // examples tidy up; services keep counters

	// Wait for the lock at most one second, retrying with jittered exponential backoff.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l, err := locker.Obtain(ctx, name, 10*time.Second, &lock.Options{
		Retry: lock.Exponential(10*time.Millisecond, 200*time.Millisecond),
	})
	if errors.Is(err, lock.ErrNotObtained) {
		fmt.Println("busy: someone else holds the lock")
		return
	}
	if err != nil {
		fmt.Println("redis:", err)
		return
	}
	fmt.Println("obtained")

	// ... short work; work that may outlast the lease belongs in WithLocks, which keeps the
	// lease alive ...

	if err := l.Release(ctx); err != nil {
		fmt.Println("release:", err)
		return
	}
	fmt.Println("released")
	// Output:
	// obtained
	// released
}

func ExampleClient_WithLocks() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	locker := lock.New(rdb)
	name := exampleName("7")
	defer rdb.Del(context.Background(), name+":fence")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// WithLocks keeps the lease alive while the work runs, cancels the work's context if the
	// lock is lost, and releases the lock when the work returns or panics.
	err := locker.WithLocks(ctx, []string{name}, 10*time.Second, func(ctx context.Context, locks []*lock.Lock) error {
		fmt.Println("working under the lock")
		return nil
	}, &lock.Options{Retry: lock.Exponential(10*time.Millisecond, 200*time.Millisecond)})
	switch {
	case errors.Is(err, lock.ErrNotObtained):
		fmt.Println("busy: someone else holds the lock")
	case errors.Is(err, lock.ErrNotHeld):
		fmt.Println("lost the lock while working")
	case err != nil:
		fmt.Println("error:", err)
	default:
		fmt.Println("done")
	}
	// Output:
	// working under the lock
	// done
}

// fencedStore is storage that checks fencing tokens: it refuses a write carrying a token no
// larger than the largest it has accepted, so a holder whose lease ran out while it was
// paused cannot overwrite the work of the holder that came after it.
type fencedStore struct {
	mu      sync.Mutex
	highest int64
	value   string
}

var errStaleFence = errors.New("stale fencing token")

func (s *fencedStore) Write(fence int64, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence <= s.highest {
		return errStaleFence
	}
	s.highest, s.value = fence, value
	return nil
}

func ExampleLock_Fence() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	locker := lock.New(rdb)
	name := exampleName("9")
	defer rdb.Del(context.Background(), name, name+":fence")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	store := &fencedStore{}

	// A takes the lock with a short lease, then stalls (a GC pause, a slow disk) past it.
	a, err := locker.Obtain(ctx, name, 100*time.Millisecond, nil)
	if err != nil {
		fmt.Println("A:", err)
		return
	}
	// B waits for A's lease to run out and takes the lock with a larger fencing token.
	b, err := locker.Obtain(ctx, name, 10*time.Second, &lock.Options{Retry: lock.Linear(10*time.Millisecond, 50*time.Millisecond)})
	if err != nil {
		fmt.Println("B:", err)
		return
	}
	defer b.Release(ctx)
	fmt.Println("B's token is larger:", b.Fence() > a.Fence())

	fmt.Println("B writes:", result(store.Write(b.Fence(), "B")))
	// A wakes up, unaware that its lease is gone, and writes: the store refuses.
	fmt.Println("A writes:", result(store.Write(a.Fence(), "A")))
	fmt.Println("stored:", store.value)
	// Output:
	// B's token is larger: true
	// B writes: ok
	// A writes: stale fencing token
	// stored: B
}

func result(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}

func ExampleClient_WithLocks_cart() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	locker := lock.New(rdb)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// A cart of products 10 and 9. The locks are taken in the order given, so every caller
	// that may lock overlapping carts sorts them the same way — here by product id, which is
	// not the byte order of the names ("{10}" < "{9}").
	run := rand.Text()
	ids := []string{"9", "10"}
	names := make([]string, len(ids))
	for i, id := range ids {
		names[i] = "stocksvc-test:example-" + run + ":lock:product:{" + id + "}"
		defer rdb.Del(context.Background(), names[i]+":fence")
	}
	err := locker.WithLocks(ctx, names, 10*time.Second, func(ctx context.Context, locks []*lock.Lock) error {
		// locks[i] is the lock of names[i]; each has its own fencing token for its product.
		for i, l := range locks {
			fmt.Printf("holding {%s}, fenced: %v\n", ids[i], l.Fence() > 0)
		}
		return nil
	}, &lock.Options{Wait: true})
	if err != nil {
		fmt.Println("error:", err)
	}
	// Output:
	// holding {9}, fenced: true
	// holding {10}, fenced: true
}
