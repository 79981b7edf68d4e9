package identity_test

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stocksvc/stocksvc/internal/identity"
	"github.com/stocksvc/stocksvc/internal/identity/identitytest"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// counted is a Verifier over a JWKS file of is, with its metrics on a registry of its own and
// a clock the test moves.
type counted struct {
	*identity.Verifier
	reg  *prometheus.Registry
	path string
	now  atomic.Int64
}

func countedVerifier(t *testing.T, is *identitytest.Issuer, mod func(*identity.Config)) *counted {
	t.Helper()
	c := &counted{reg: prometheus.NewRegistry()}
	c.now.Store(time.Now().UnixNano())
	c.Verifier, c.path = fileVerifier(t, is, func(cfg *identity.Config) {
		cfg.Registerer = c.reg
		cfg.Now = func() time.Time { return time.Unix(0, c.now.Load()) }
		cfg.FileCheck = time.Minute
		if mod != nil {
			mod(cfg)
		}
	})
	return c
}

// checks returns how many tokens were judged from source with outcome.
func (c *counted) checks(t *testing.T, source, outcome string) int {
	t.Helper()
	return int(testenv.Metric(t, c.reg, "stocksvc_customer_tokens_total", "source", source, "outcome", outcome))
}

// signatures is how many signatures were checked.
func (c *counted) signatures(t *testing.T) int {
	t.Helper()
	return c.checks(t, "signature", "accepted") + c.checks(t, "signature", "refused")
}

func (c *counted) advance(d time.Duration) { c.now.Add(int64(d)) }

// TestVerifiedTokenIsNotVerifiedAgain: a token is verified once; the requests after it are
// answered from memory, with no signature checked, until it expires.
func TestVerifiedTokenIsNotVerifiedAgain(t *testing.T) {
	t.Parallel()
	is := newIssuer(t)
	v := countedVerifier(t, is, func(c *identity.Config) { c.Leeway = 0 })
	tok, err := is.Token("alice", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if got, err := v.Verify(context.Background(), tok); err != nil || got != "alice" {
			t.Fatalf("Verify = %q, %v; want alice", got, err)
		}
	}
	if got := v.signatures(t); got != 1 {
		t.Fatalf("%d signatures checked for five requests of one token, want 1", got)
	}
	if got := v.checks(t, "memory", "accepted"); got != 4 {
		t.Fatalf("%d answered from memory, want 4", got)
	}
	if got, err := v.Remembered(context.Background(), tok); err != nil || got != "alice" {
		t.Fatalf("Remembered = %q, %v; want alice", got, err)
	}
	v.advance(2 * time.Minute)
	for range 2 {
		if _, err := v.Verify(context.Background(), tok); !errors.Is(err, identity.ErrExpired) {
			t.Fatalf("after its exp: %v, want ErrExpired", err)
		}
	}
	if got := v.signatures(t); got != 1 {
		t.Fatalf("%d signatures checked, want still 1: a remembered token's expiry needs none", got)
	}
}

// TestRefusedTokenIsRefusedFromMemory: a token refused after its signature was checked is
// refused again with no signature checked: a bad signature and an expired token for good, a
// token not valid yet until its nbf, when it is checked again and accepted.
func TestRefusedTokenIsRefusedFromMemory(t *testing.T) {
	t.Parallel()
	is := newIssuer(t)
	other := newIssuer(t)
	v := countedVerifier(t, is, func(c *identity.Config) { c.Leeway = 0 })
	now := time.Unix(0, v.now.Load())
	good := mustToken(t, is, identitytest.Claims{Subject: "bob", Expires: now.Add(time.Hour)})
	parts := strings.Split(good, ".")
	forged := parts[0] + "." + parts[1] + "." + strings.Split(mustToken(t, other, identitytest.Claims{Subject: "bob", Expires: now.Add(time.Hour)}), ".")[2]
	expired := mustToken(t, is, identitytest.Claims{Subject: "bob", Expires: now.Add(-time.Minute)})
	early := mustToken(t, is, identitytest.Claims{Subject: "bob", NotBefore: now.Add(time.Minute), Expires: now.Add(time.Hour)})

	for _, tc := range []struct {
		name  string
		token string
		want  error
	}{
		{"bad signature", forged, identity.ErrBadSignature},
		{"expired", expired, identity.ErrExpired},
		{"not yet valid", early, identity.ErrNotYetValid},
	} {
		before := v.signatures(t)
		for i := range 3 {
			if _, err := v.Verify(context.Background(), tc.token); !errors.Is(err, tc.want) {
				t.Fatalf("%s, request %d: %v, want %v", tc.name, i+1, err, tc.want)
			}
		}
		if got := v.signatures(t) - before; got != 1 {
			t.Errorf("%s: %d signatures checked for three requests, want 1", tc.name, got)
		}
		if _, err := v.Remembered(context.Background(), tc.token); !errors.Is(err, tc.want) {
			t.Errorf("%s: Remembered = %v, want %v", tc.name, err, tc.want)
		}
	}
	if got := v.checks(t, "memory", "refused"); got != 9 {
		t.Errorf("%d refused from memory, want 9 (two requests and a Remembered of each)", got)
	}

	v.advance(time.Minute) // the nbf
	before := v.signatures(t)
	if got, err := v.Verify(context.Background(), early); err != nil || got != "bob" {
		t.Fatalf("at its nbf: %q, %v; want bob", got, err)
	}
	if got := v.signatures(t) - before; got != 1 {
		t.Errorf("at its nbf: %d signatures checked, want 1 (the refusal no longer holds)", got)
	}
	for name, tok := range map[string]string{"bad signature": forged, "expired": expired} {
		if _, err := v.Remembered(context.Background(), tok); errors.Is(err, identity.ErrNotRemembered) {
			t.Errorf("%s: forgotten after a minute: %v", name, err)
		}
	}
}

// TestKeyChangeForgetsRefusals: a token refused because the keys did not verify it is
// accepted once the keys change to ones that do (a rotation whose file was late); a rewrite
// of the same keys forgets nothing.
func TestKeyChangeForgetsRefusals(t *testing.T) {
	t.Parallel()
	is := newIssuer(t)
	v := countedVerifier(t, is, nil)
	verified, _ := is.Token("carol", time.Hour)
	if _, err := v.Verify(context.Background(), verified); err != nil {
		t.Fatal(err)
	}
	// The same keys, written again: a new file, nothing changed.
	if err := is.WriteJWKS(v.path); err != nil {
		t.Fatal(err)
	}
	v.advance(time.Minute)
	if _, err := v.Verify(context.Background(), verified); err != nil {
		t.Fatal(err)
	}
	if got := v.signatures(t); got != 1 {
		t.Fatalf("%d signatures after the same keys were written again, want 1: nothing should be forgotten", got)
	}

	// A token under a kid the file holds, signed by a key it does not: refused, and
	// remembered as refused, until the file holds the key that signed it.
	impostor := newIssuer(t)
	tok := mustToken(t, impostor, identitytest.Claims{Subject: "carol", Expires: time.Unix(0, v.now.Load()).Add(time.Hour)})
	if err := os.WriteFile(v.path, rekeyed(t, impostor.KeyID()), 0o644); err != nil {
		t.Fatal(err)
	}
	v.advance(time.Minute)
	for range 2 {
		if _, err := v.Verify(context.Background(), tok); !errors.Is(err, identity.ErrBadSignature) {
			t.Fatalf("signed by another key of its kid: %v, want ErrBadSignature", err)
		}
	}
	if got := v.checks(t, "memory", "refused"); got != 1 {
		t.Fatalf("%d refused from memory, want 1", got)
	}
	if err := impostor.WriteJWKS(v.path); err != nil {
		t.Fatal(err)
	}
	v.advance(time.Minute)
	if got, err := v.Verify(context.Background(), tok); err != nil || got != "carol" {
		t.Fatalf("after the keys changed to the one that signed it: %q, %v; want carol", got, err)
	}
	if got := testenv.Metric(t, v.reg, "stocksvc_customer_token_memory_purges_total"); got != 2 {
		t.Errorf("%v purges, want 2 (two changes of keys)", got)
	}
}

// rekeyed returns a JWKS of one fresh key under kid.
func rekeyed(t *testing.T, kid string) []byte {
	t.Helper()
	other := newIssuer(t)
	jwks := string(other.JWKS())
	return []byte(strings.Replace(jwks, `"kid":"`+other.KeyID()+`"`, `"kid":"`+kid+`"`, 1))
}

// TestPrechecksRefuseBeforeAnySignature: what the size, shape and header of a token, or the
// keys it names, refuse is refused with no signature checked, and is not remembered.
func TestPrechecksRefuseBeforeAnySignature(t *testing.T) {
	t.Parallel()
	is := newIssuer(t)
	v := countedVerifier(t, is, nil)
	now := time.Unix(0, v.now.Load())
	valid := identitytest.Claims{Subject: "dana", Expires: now.Add(time.Hour)}
	good := mustToken(t, is, valid)
	parts := strings.Split(good, ".")
	withHeader := func(h string) string {
		return base64.RawURLEncoding.EncodeToString([]byte(h)) + "." + parts[1] + "." + parts[2]
	}
	kid := is.KeyID()
	crit, err := is.SignWithHeader(valid, map[string]any{"crit": []string{"exp"}})
	if err != nil {
		t.Fatal(err)
	}
	b64, err := is.SignWithHeader(valid, map[string]any{"b64": true, "crit": []string{"b64"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		token string
		want  error
	}{
		{"crit", crit, identity.ErrMalformed},
		{"b64", b64, identity.ErrMalformed},
		{"two segments", parts[0] + "." + parts[1], identity.ErrMalformed},
		{"four segments", good + ".x", identity.ErrMalformed},
		{"empty header", "." + parts[1] + "." + parts[2], identity.ErrMalformed},
		{"not base64url", parts[0] + "." + parts[1] + "." + parts[2][:10] + "+/" + parts[2][12:], identity.ErrMalformed},
		{"header not JSON", withHeader(`not json`), identity.ErrMalformed},
		{"no kid", withHeader(`{"alg":"ES256","typ":"JWT"}`), identity.ErrMalformed},
		{"no alg", withHeader(`{"kid":"` + kid + `"}`), identity.ErrBadSignature},
		{"alg none", withHeader(`{"alg":"none","kid":"` + kid + `"}`), identity.ErrBadSignature},
		{"alg HS256", withHeader(`{"alg":"HS256","kid":"` + kid + `"}`), identity.ErrBadSignature},
		{"alg of another family", withHeader(`{"alg":"RS256","kid":"` + kid + `"}`), identity.ErrBadSignature},
		{"alg of another curve", withHeader(`{"alg":"ES384","kid":"` + kid + `"}`), identity.ErrBadSignature},
		{"no signature", parts[0] + "." + parts[1] + ".", identity.ErrBadSignature},
		{"unknown kid", withHeader(`{"alg":"ES256","kid":"made-up"}`), identity.ErrUnknownKey},
		{"too long", strings.Repeat("a", identity.MaxTokenLen+1), identity.ErrMalformed},
	} {
		for range 2 {
			if _, err := v.Verify(context.Background(), tc.token); !errors.Is(err, tc.want) {
				t.Fatalf("%s: %v, want %v", tc.name, err, tc.want)
			}
		}
		if _, err := v.Remembered(context.Background(), tc.token); tc.name != "too long" && !errors.Is(err, identity.ErrNotRemembered) {
			t.Errorf("%s: Remembered = %v, want ErrNotRemembered: a pre-check's refusal is not remembered", tc.name, err)
		}
	}
	if got := v.signatures(t); got != 0 {
		t.Errorf("%d signatures checked, want none", got)
	}
	if got := v.checks(t, "precheck", "refused"); got != 33 {
		t.Errorf("%d refused by a pre-check, want 33", got)
	}
	if got, err := v.Verify(context.Background(), good); err != nil || got != "dana" {
		t.Fatalf("the good token: %q, %v", got, err)
	}
}

// TestMemoryIsBounded: past Remember tokens, the least recently used is forgotten.
func TestMemoryIsBounded(t *testing.T) {
	t.Parallel()
	is := newIssuer(t)
	v := countedVerifier(t, is, func(c *identity.Config) { c.Remember = 2 })
	var toks []string
	for _, who := range []string{"a", "b", "c"} {
		tok, _ := is.Token(who, time.Hour)
		toks = append(toks, tok)
		if _, err := v.Verify(context.Background(), tok); err != nil {
			t.Fatal(err)
		}
	}
	if got := testenv.Metric(t, v.reg, "stocksvc_customer_token_memory_entries", "kind", "verified"); got != 2 {
		t.Errorf("%v remembered, want 2", got)
	}
	if got := testenv.Metric(t, v.reg, "stocksvc_customer_token_memory_evictions_total", "kind", "verified"); got != 1 {
		t.Errorf("%v evicted, want 1", got)
	}
	if _, err := v.Remembered(context.Background(), toks[0]); !errors.Is(err, identity.ErrNotRemembered) {
		t.Errorf("the oldest token: %v, want ErrNotRemembered", err)
	}
	if _, err := v.Remembered(context.Background(), toks[2]); err != nil {
		t.Errorf("the newest token: %v, want remembered", err)
	}
}

func TestCheckJWKSTransport(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url   string
		allow bool
		ok    bool
	}{
		{"https://keys.example/jwks.json", false, true},
		{"http://127.0.0.1:8000/jwks.json", false, true},
		{"http://127.9.9.9/jwks.json", false, true},
		{"http://[::1]:8000/jwks.json", false, true},
		{"http://localhost/jwks.json", false, true},
		{"http://keys.example/jwks.json", false, false},
		{"http://localhost.example/jwks.json", false, false},
		{"http://keys.example/jwks.json", true, true},
	} {
		err := identity.CheckJWKSTransport(tc.url, tc.allow)
		if got := err == nil; got != tc.ok || err != nil && !errors.Is(err, identity.ErrPlainHTTP) {
			t.Errorf("CheckJWKSTransport(%q, %v) = %v, want ok %v", tc.url, tc.allow, err, tc.ok)
		}
	}
}
