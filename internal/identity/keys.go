package identity

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/lestrrat-go/httprc/v3"
	"github.com/lestrrat-go/httprc/v3/errsink"
	"github.com/lestrrat-go/jwx/v3/jwk"
)

// keySource holds the keys tokens are verified with.
type keySource interface {
	// current returns the keys as last read, having looked at the source again if it is
	// time to.
	current(ctx context.Context) (jwk.Set, error)
	// lookAgain looks at the source now, unless it was looked at less than FileCheck ago,
	// and returns the keys then current: a token names a key the set does not hold.
	lookAgain(ctx context.Context) (jwk.Set, error)
	close() error
}

// publicKeys returns the verification keys of a parsed JWKS: the public form of each key,
// refusing a set with a symmetric key (whoever can read the set could sign with it) or with
// none at all.
func publicKeys(set jwk.Set) (jwk.Set, error) {
	if set.Len() == 0 {
		return nil, fmt.Errorf("the JWKS holds no key")
	}
	pub, err := jwk.PublicSetOf(set, jwk.WithOmitUnsupportedKeys(true))
	if err != nil {
		return nil, err
	}
	if pub.Len() == 0 {
		return nil, fmt.Errorf("the JWKS holds no key this service can verify with")
	}
	return pub, nil
}

// sameKeys reports whether a and b hold the same keys, so that a refresh or a rewrite that
// changed nothing keeps the set it found: the Verifier forgets what it remembered of tokens
// when the set changes.
func sameKeys(a, b jwk.Set) bool {
	if a == nil || b == nil {
		return a == b
	}
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// fileKeys reads the keys from a file, and again when the file changes.
type fileKeys struct {
	path    string
	every   time.Duration
	now     func() time.Time
	onError func(error)

	mu      sync.Mutex
	set     jwk.Set
	info    os.FileInfo // the file as last read
	checked time.Time   // when the file's metadata was last looked at
}

func newFileKeys(path string, every time.Duration, now func() time.Time, onError func(error)) (*fileKeys, error) {
	k := &fileKeys{path: path, every: every, now: now, onError: onError}
	info, set, err := k.read()
	if err != nil {
		return nil, err
	}
	k.set, k.info, k.checked = set, info, now()
	return k, nil
}

// read reads and parses the file, returning its metadata as of before the read: were it
// replaced meanwhile, the next look sees a change and reads it again.
func (k *fileKeys) read() (os.FileInfo, jwk.Set, error) {
	info, err := os.Stat(k.path)
	if err != nil {
		return nil, nil, fmt.Errorf("JWKS file: %w", err)
	}
	raw, err := os.ReadFile(k.path)
	if err != nil {
		return nil, nil, fmt.Errorf("JWKS file: %w", err)
	}
	parsed, err := jwk.Parse(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("JWKS file %s: %w", k.path, err)
	}
	set, err := publicKeys(parsed)
	if err != nil {
		return nil, nil, fmt.Errorf("JWKS file %s: %w", k.path, err)
	}
	return info, set, nil
}

func (k *fileKeys) current(context.Context) (jwk.Set, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.now().Sub(k.checked) >= k.every {
		k.reloadLocked()
	}
	return k.set, nil
}

func (k *fileKeys) lookAgain(ctx context.Context) (jwk.Set, error) {
	// A look costs a stat, and a read only when the file changed; the rate limit of the URL's
	// fetches is not needed for a file, so a rotation is seen by the first token of the new
	// key.
	k.mu.Lock()
	defer k.mu.Unlock()
	k.reloadLocked()
	return k.set, nil
}

// reloadLocked reads the file again when its metadata says it changed. A file that cannot be
// read or parsed leaves the keys as they were (a half-done edit must not log every customer
// out), and is reported.
func (k *fileKeys) reloadLocked() {
	k.checked = k.now()
	info, err := os.Stat(k.path)
	if err != nil {
		k.onError(fmt.Errorf("JWKS file: %w", err))
		return
	}
	if os.SameFile(info, k.info) && info.ModTime().Equal(k.info.ModTime()) && info.Size() == k.info.Size() {
		return
	}
	info, set, err := k.read()
	if err != nil {
		k.onError(err)
		return
	}
	k.info = info
	if !sameKeys(set, k.set) {
		k.set = set
	}
}

func (k *fileKeys) close() error { return nil }

// urlKeys fetches the keys from a URL through jwx's cache, which refetches them in the
// background.
type urlKeys struct {
	url     string
	cache   *jwk.Cache
	every   time.Duration
	now     func() time.Time
	onError func(error)

	mu  sync.Mutex
	raw jwk.Set // the set the cache last gave, and its public keys
	pub jwk.Set
	// refreshing and refreshed rate-limit lookAgain's fetches.
	refreshing sync.Mutex
	refreshed  time.Time
}

func newURLKeys(ctx context.Context, cfg Config) (*urlKeys, error) {
	k := &urlKeys{url: cfg.JWKSURL, every: cfg.FileCheck, now: cfg.Now, onError: cfg.OnError}
	client := httprc.NewClient(
		// Only the configured URL is ever fetched, whatever a key set might point to.
		httprc.WithWhitelist(httprc.WhitelistFunc(func(u string) bool { return u == cfg.JWKSURL })),
		httprc.WithErrorSink(errsink.NewFunc(func(_ context.Context, err error) {
			cfg.OnError(fmt.Errorf("JWKS URL refresh: %w", err))
		})),
		httprc.WithWorkers(1),
	)
	// The cache's goroutines live until close, not until the start-up context ends.
	cache, err := jwk.NewCache(context.WithoutCancel(ctx), client)
	if err != nil {
		return nil, fmt.Errorf("JWKS URL: %w", err)
	}
	k.cache = cache
	opts := []jwk.RegisterOption{jwk.WithConstantInterval(cfg.Refresh)}
	if cfg.HTTPClient != nil {
		opts = append(opts, jwk.WithHTTPClient(cfg.HTTPClient))
	}
	if err := cache.Register(ctx, cfg.JWKSURL, opts...); err != nil {
		_ = k.close()
		return nil, fmt.Errorf("JWKS URL %s: first fetch: %w", cfg.JWKSURL, err)
	}
	if _, err := k.current(ctx); err != nil {
		_ = k.close()
		return nil, err
	}
	return k, nil
}

func (k *urlKeys) current(ctx context.Context) (jwk.Set, error) {
	raw, err := k.cache.Lookup(ctx, k.url)
	if err != nil {
		return nil, fmt.Errorf("JWKS URL %s: %w", k.url, err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if raw == k.raw {
		return k.pub, nil
	}
	pub, err := publicKeys(raw)
	if err != nil {
		if k.pub == nil {
			return nil, fmt.Errorf("JWKS URL %s: %w", k.url, err)
		}
		// A fetched set that cannot be used leaves the last usable one in place; it is
		// reported once, as the cache keeps handing the same set back.
		k.onError(fmt.Errorf("JWKS URL %s: %w", k.url, err))
		k.raw = raw
		return k.pub, nil
	}
	k.raw = raw
	if !sameKeys(pub, k.pub) {
		k.pub = pub
	}
	return k.pub, nil
}

func (k *urlKeys) lookAgain(ctx context.Context) (jwk.Set, error) {
	// One fetch at a time, and at most one per FileCheck: a token with a made-up kid must
	// not turn into a request to the key server.
	if k.refreshing.TryLock() {
		if k.now().Sub(k.refreshed) >= k.every {
			k.refreshed = k.now()
			if _, err := k.cache.Refresh(ctx, k.url); err != nil {
				k.onError(fmt.Errorf("JWKS URL %s: %w", k.url, err))
			}
		}
		k.refreshing.Unlock()
	}
	return k.current(ctx)
}

func (k *urlKeys) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return k.cache.Shutdown(ctx)
}
