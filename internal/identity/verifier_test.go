package identity_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stocksvc/stocksvc/internal/clock"
	"github.com/stocksvc/stocksvc/internal/identity"
	"github.com/stocksvc/stocksvc/internal/identity/identitytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	issuer   = "https://issuer.test"
	audience = "stocksvc-test"
)

func newIssuer(t *testing.T) *identitytest.Issuer {
	t.Helper()
	is, err := identitytest.NewIssuer(issuer, audience)
	if err != nil {
		t.Fatal(err)
	}
	return is
}

// fileVerifier returns a Verifier over a JWKS file written by is, and the file's path.
func fileVerifier(t testing.TB, is *identitytest.Issuer, mod func(*identity.Config)) (*identity.Verifier, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := is.WriteJWKS(path); err != nil {
		t.Fatal(err)
	}
	cfg := identity.Config{Issuer: issuer, Audience: audience, JWKSFile: path, Leeway: 30 * time.Second,
		OnError: func(err error) { t.Logf("reload: %v", err) }}
	if mod != nil {
		mod(&cfg)
	}
	v, err := identity.NewVerifier(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	return v, path
}

func mustToken(t *testing.T, is *identitytest.Issuer, c identitytest.Claims) string {
	t.Helper()
	tok, err := is.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestVerify(t *testing.T) {
	t.Parallel()
	is := newIssuer(t)
	v, _ := fileVerifier(t, is, nil)
	other := newIssuer(t) // same iss and aud, keys this verifier does not know
	now := time.Now()
	valid := identitytest.Claims{Subject: "alice", IssuedAt: now, NotBefore: now, Expires: now.Add(time.Minute)}
	with := func(f func(c *identitytest.Claims)) identitytest.Claims {
		c := valid
		f(&c)
		return c
	}
	good := mustToken(t, is, valid)
	parts := strings.Split(good, ".")
	// The same header and claims, signed by a key of the same kid that is not the issuer's:
	// other's token under is's kid.
	forged := func() string {
		o := strings.Split(mustToken(t, other, valid), ".")
		return parts[0] + "." + parts[1] + "." + o[2]
	}()
	tampered := func() string {
		claims, _ := base64.RawURLEncoding.DecodeString(parts[1])
		changed := strings.Replace(string(claims), `"alice"`, `"mallo"`, 1)
		return parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(changed)) + "." + parts[2]
	}()
	algNone := func() string {
		header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","kid":"` + is.KeyID() + `","typ":"JWT"}`))
		return header + "." + parts[1] + "."
	}()

	tests := []struct {
		name  string
		token string
		want  error
	}{
		{"valid", good, nil},
		{"valid within the leeway after exp", mustToken(t, is, with(func(c *identitytest.Claims) { c.Expires = now.Add(-10 * time.Second) })), nil},
		{"expired", mustToken(t, is, with(func(c *identitytest.Claims) { c.Expires = now.Add(-time.Minute) })), identity.ErrExpired},
		{"no exp", mustToken(t, is, with(func(c *identitytest.Claims) { c.Expires = time.Time{} })), identity.ErrExpired},
		{"not yet valid", mustToken(t, is, with(func(c *identitytest.Claims) { c.NotBefore = now.Add(time.Minute) })), identity.ErrNotYetValid},
		{"wrong issuer", mustToken(t, is, with(func(c *identitytest.Claims) { c.Issuer = "https://elsewhere.test" })), identity.ErrWrongIssuer},
		{"wrong audience", mustToken(t, is, with(func(c *identitytest.Claims) { c.Audience = "another-service" })), identity.ErrWrongAudience},
		{"unknown kid", mustToken(t, other, valid), identity.ErrUnknownKey},
		{"bad signature", forged, identity.ErrBadSignature},
		{"claims changed after signing", tampered, identity.ErrBadSignature},
		{"alg none", algNone, identity.ErrBadSignature},
		{"no subject", mustToken(t, is, with(func(c *identitytest.Claims) { c.Subject = "" })), identity.ErrInvalidCustomer},
		{"subject too long for a customer id", mustToken(t, is, with(func(c *identitytest.Claims) { c.Subject = strings.Repeat("x", 65) })), identity.ErrInvalidCustomer},
		{"subject with a control character", mustToken(t, is, with(func(c *identitytest.Claims) { c.Subject = "a\nb" })), identity.ErrInvalidCustomer},
		{"not a JWT", "not-a-token", identity.ErrMalformed},
		{"too long", strings.Repeat("a", identity.MaxTokenLen+1), identity.ErrMalformed},
		{"empty", "", identity.ErrNoCredential},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := v.Verify(context.Background(), tt.token)
			if tt.want == nil {
				if err != nil || got != "alice" {
					t.Fatalf("Verify = %q, %v; want alice", got, err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Verify = %q, %v; want %v", got, err, tt.want)
			}
			if !errors.Is(err, identity.ErrUnauthenticated) || got != "" {
				t.Fatalf("Verify = %q, %v; want no customer and ErrUnauthenticated", got, err)
			}
		})
	}
}

// TestLeewayIsConfigured: the same token a minute past its exp is refused with the default
// leeway and accepted with a leeway of two minutes.
func TestLeewayIsConfigured(t *testing.T) {
	t.Parallel()
	is := newIssuer(t)
	now := time.Now()
	tok := mustToken(t, is, identitytest.Claims{Subject: "bob", Expires: now.Add(-time.Minute)})
	strict, _ := fileVerifier(t, is, nil)
	if _, err := strict.Verify(context.Background(), tok); !errors.Is(err, identity.ErrExpired) {
		t.Fatalf("30s leeway: %v, want ErrExpired", err)
	}
	lenient, _ := fileVerifier(t, is, func(c *identity.Config) { c.Leeway = 2 * time.Minute })
	if got, err := lenient.Verify(context.Background(), tok); err != nil || got != "bob" {
		t.Fatalf("2m leeway: %q, %v; want bob", got, err)
	}
}

// TestRotationThroughTheFile: the issuer starts signing with a new key and rewrites the file;
// the first token of the new key is accepted without a restart, and the old key's tokens still
// are while the file holds it. A file rewritten without the old key refuses its tokens once the
// file has been looked at again.
func TestRotationThroughTheFile(t *testing.T) {
	t.Parallel()
	is := newIssuer(t)
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clockNow := func() time.Time { return time.Unix(0, now.Load()) }
	v, path := fileVerifier(t, is, func(c *identity.Config) { c.Now = clockNow; c.FileCheck = time.Minute })
	old, err := is.Token("carol", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := is.Rotate(); err != nil {
		t.Fatal(err)
	}
	fresh, err := is.Token("carol", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), fresh); !errors.Is(err, identity.ErrUnknownKey) {
		t.Fatalf("new key before the file has it: %v, want ErrUnknownKey", err)
	}
	if err := is.WriteJWKS(path); err != nil {
		t.Fatal(err)
	}
	for name, tok := range map[string]string{"new key": fresh, "old key": old} {
		if got, err := v.Verify(context.Background(), tok); err != nil || got != "carol" {
			t.Fatalf("%s after the rewrite: %q, %v; want carol", name, got, err)
		}
	}

	// The file rewritten with a set that no longer holds the old key (another issuer's).
	only := newIssuer(t)
	if err := only.WriteJWKS(path); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), old); err != nil {
		t.Fatalf("old key before the file is looked at again: %v; the keys should not be re-read before FileCheck", err)
	}
	now.Add(int64(time.Minute))
	if _, err := v.Verify(context.Background(), old); !errors.Is(err, identity.ErrUnknownKey) {
		t.Fatalf("old key after the file dropped it: %v, want ErrUnknownKey", err)
	}
}

// TestVerifiedTokenStillExpires: a token verified once is answered again without a signature
// check, but never past its expiry.
func TestVerifiedTokenStillExpires(t *testing.T) {
	t.Parallel()
	is := newIssuer(t)
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	v, _ := fileVerifier(t, is, func(c *identity.Config) {
		c.Now = func() time.Time { return time.Unix(0, now.Load()) }
		c.Leeway = 0
	})
	tok, err := is.Token("dana", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if got, err := v.Verify(context.Background(), tok); err != nil || got != "dana" {
			t.Fatalf("verify: %q, %v; want dana", got, err)
		}
	}
	now.Add(int64(2 * time.Minute))
	if _, err := v.Verify(context.Background(), tok); !errors.Is(err, identity.ErrExpired) {
		t.Errorf("a verified token after its expiry: %v, want ErrExpired", err)
	}
}

// TestBrokenFileKeepsTheKeys: a JWKS file rewritten with garbage leaves the keys as they were,
// and the failure is reported.
func TestBrokenFileKeepsTheKeys(t *testing.T) {
	t.Parallel()
	is := newIssuer(t)
	var reported atomic.Int32
	v, path := fileVerifier(t, is, func(c *identity.Config) { c.OnError = func(error) { reported.Add(1) } })
	if err := os.WriteFile(path+".new", []byte(`{"keys": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	other := newIssuer(t)
	// An unknown kid makes the verifier look at the file at once: it is broken.
	if _, err := v.Verify(context.Background(), mustToken(t, other, identitytest.Claims{Subject: "d", Expires: time.Now().Add(time.Minute)})); !errors.Is(err, identity.ErrUnknownKey) {
		t.Fatalf("unknown kid: %v", err)
	}
	if reported.Load() == 0 {
		t.Fatal("the broken file was not reported")
	}
	tok, _ := is.Token("dave", time.Minute)
	if got, err := v.Verify(context.Background(), tok); err != nil || got != "dave" {
		t.Fatalf("after a broken rewrite: %q, %v; want dave (the keys read before)", got, err)
	}
}

// jwksServer serves an issuer's JWKS on loopback, counting the fetches.
type jwksServer struct {
	*httptest.Server
	mu      sync.Mutex
	body    []byte
	fetches atomic.Int32
}

func newJWKSServer(t *testing.T, body []byte) *jwksServer {
	t.Helper()
	s := &jwksServer{body: body}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		body := s.body
		s.mu.Unlock()
		s.fetches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) set(body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.body = body
}

func urlVerifier(t *testing.T, url string, mod func(*identity.Config)) *identity.Verifier {
	t.Helper()
	cfg := identity.Config{Issuer: issuer, Audience: audience, JWKSURL: url,
		OnError: func(err error) { t.Logf("refresh: %v", err) }}
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := identity.NewVerifier(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := v.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return v
}

// TestJWKSURLRotation: a token signed by a key the URL started serving after the first fetch
// makes the verifier fetch again, once, and is accepted; a made-up kid right after costs no
// fetch (the rate limit).
func TestJWKSURLRotation(t *testing.T) {
	t.Parallel()
	is := newIssuer(t)
	srv := newJWKSServer(t, is.JWKS())
	v := urlVerifier(t, srv.URL, func(c *identity.Config) { c.FileCheck = time.Hour })
	tok, _ := is.Token("erin", time.Minute)
	if got, err := v.Verify(context.Background(), tok); err != nil || got != "erin" {
		t.Fatalf("first key: %q, %v", got, err)
	}
	if err := is.Rotate(); err != nil {
		t.Fatal(err)
	}
	srv.set(is.JWKS())
	before := srv.fetches.Load()
	tok, _ = is.Token("erin", time.Minute)
	if got, err := v.Verify(context.Background(), tok); err != nil || got != "erin" {
		t.Fatalf("rotated key: %q, %v", got, err)
	}
	if got := srv.fetches.Load() - before; got != 1 {
		t.Fatalf("fetches for the rotated key: %d, want 1", got)
	}
	other := newIssuer(t)
	bogus, _ := other.Token("erin", time.Minute)
	if _, err := v.Verify(context.Background(), bogus); !errors.Is(err, identity.ErrUnknownKey) {
		t.Fatalf("made-up kid: %v, want ErrUnknownKey", err)
	}
	if got := srv.fetches.Load() - before; got != 1 {
		t.Fatalf("fetches after a made-up kid within the rate limit: %d, want still 1", got)
	}
}

// TestJWKSURLRefresh: the cache fetches the URL again on its own every Refresh, so a key the
// issuer withdrew stops verifying without any token asking for it. The wait is the point:
// the refresh runs on jwx's schedule (whole seconds).
func TestJWKSURLRefresh(t *testing.T) {
	t.Parallel()
	is := newIssuer(t)
	srv := newJWKSServer(t, is.JWKS())
	v := urlVerifier(t, srv.URL, func(c *identity.Config) { c.Refresh = time.Second })
	tok, _ := is.Token("frank", time.Minute)
	if _, err := v.Verify(context.Background(), tok); err != nil {
		t.Fatalf("before the withdrawal: %v", err)
	}
	srv.set(newIssuer(t).JWKS()) // the old key withdrawn
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		_, err := v.Verify(context.Background(), tok)
		if errors.Is(err, identity.ErrUnknownKey) {
			return
		}
		if err != nil {
			t.Fatalf("while waiting for the refresh: %v", err)
		}
		if err := clock.Sleep(ctx, 100*time.Millisecond); err != nil {
			t.Fatalf("the withdrawn key still verifies after %d fetches", srv.fetches.Load())
		}
	}
}

func TestNewVerifierRefuses(t *testing.T) {
	t.Parallel()
	is := newIssuer(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "jwks.json")
	if err := is.WriteJWKS(good); err != nil {
		t.Fatal(err)
	}
	symmetric := filepath.Join(dir, "oct.json")
	if err := os.WriteFile(symmetric, []byte(`{"keys":[{"kty":"oct","kid":"s","alg":"HS256","k":"c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.json")
	if err := os.WriteFile(empty, []byte(`{"keys":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		cfg    identity.Config
		config bool // ErrConfig expected
	}{
		{"no issuer", identity.Config{Audience: audience, JWKSFile: good}, true},
		{"no audience", identity.Config{Issuer: issuer, JWKSFile: good}, true},
		{"no keys", identity.Config{Issuer: issuer, Audience: audience}, true},
		{"file and URL", identity.Config{Issuer: issuer, Audience: audience, JWKSFile: good, JWKSURL: "http://127.0.0.1:1/jwks"}, true},
		{"URL not http", identity.Config{Issuer: issuer, Audience: audience, JWKSURL: "file:///etc/jwks.json"}, true},
		{"plain http to another host", identity.Config{Issuer: issuer, Audience: audience, JWKSURL: "http://keys.example/jwks.json"}, true},
		{"negative leeway", identity.Config{Issuer: issuer, Audience: audience, JWKSFile: good, Leeway: -time.Second}, true},
		{"missing file", identity.Config{Issuer: issuer, Audience: audience, JWKSFile: filepath.Join(dir, "none.json")}, false},
		{"symmetric key", identity.Config{Issuer: issuer, Audience: audience, JWKSFile: symmetric}, false},
		{"empty set", identity.Config{Issuer: issuer, Audience: audience, JWKSFile: empty}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := identity.NewVerifier(context.Background(), tt.cfg)
			if err == nil {
				_ = v.Close()
				t.Fatal("NewVerifier accepted it")
			}
			if got := errors.Is(err, identity.ErrConfig); got != tt.config {
				t.Fatalf("errors.Is(%v, ErrConfig) = %v, want %v", err, got, tt.config)
			}
		})
	}
}

// TestJWKSURLDownAtStart: a URL that does not answer fails NewVerifier within its context.
func TestJWKSURLDownAtStart(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v, err := identity.NewVerifier(ctx, identity.Config{Issuer: issuer, Audience: audience, JWKSURL: srv.URL})
	if err == nil {
		_ = v.Close()
		t.Fatal("NewVerifier accepted a JWKS URL answering 503")
	}
}

func TestFromHeader(t *testing.T) {
	t.Parallel()
	if got, err := identity.FromHeader("gina"); err != nil || got != "gina" {
		t.Fatalf("FromHeader(gina) = %q, %v", got, err)
	}
	if _, err := identity.FromHeader(""); !errors.Is(err, identity.ErrNoCredential) {
		t.Fatalf("empty: %v, want ErrNoCredential", err)
	}
	if _, err := identity.FromHeader("   "); !errors.Is(err, identity.ErrInvalidCustomer) {
		t.Fatalf("blank: %v, want ErrInvalidCustomer", err)
	}
}

func TestParseMode(t *testing.T) {
	t.Parallel()
	for _, m := range []identity.Mode{identity.ModeToken, identity.ModeGateway, identity.ModeBody} {
		if got, err := identity.ParseMode(string(m)); err != nil || got != m {
			t.Fatalf("ParseMode(%q) = %q, %v", m, got, err)
		}
	}
	if _, err := identity.ParseMode("jwt"); !errors.Is(err, identity.ErrUnknownMode) {
		t.Fatalf("ParseMode(jwt): %v, want ErrUnknownMode", err)
	}
	if identity.ModeBody.Verified() || !identity.ModeToken.Verified() || !identity.ModeGateway.Verified() {
		t.Fatal("Verified: only token and gateway name the customer from something other than the body")
	}
}
