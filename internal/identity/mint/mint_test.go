package mint_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"go.uber.org/goleak"

	"github.com/stocksvc/stocksvc/internal/identity"
	"github.com/stocksvc/stocksvc/internal/identity/mint"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestKeyRoundTrip: a key written as JSON and parsed back signs tokens that the service's
// Verifier accepts over the key's JWKS; the kid is the key's, the subject the customer.
func TestKeyRoundTrip(t *testing.T) {
	t.Parallel()
	key, err := mint.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(key)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := mint.ParseKey(raw)
	if err != nil {
		t.Fatalf("ParseKey of a key NewKey made: %v", err)
	}
	jwks, err := mint.KeySet(key)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(jwks), `"d"`) {
		t.Fatalf("the JWKS holds a private part: %s", jwks)
	}
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := mint.WriteFile(path, jwks, 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := identity.NewVerifier(context.Background(), identity.Config{Issuer: "iss", Audience: "aud", JWKSFile: path})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	now := time.Now()
	tok, err := mint.Sign(parsed, mint.Claims{Issuer: "iss", Audience: "aud", Subject: "alice", IssuedAt: now, NotBefore: now, Expires: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := v.Verify(context.Background(), tok); err != nil || got != "alice" {
		t.Fatalf("Verify = %q, %v; want alice", got, err)
	}
	// Another key's token names a kid the set does not hold.
	other, err := mint.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if kid, _ := other.KeyID(); kid == "" || kid == keyID(t, key) {
		t.Fatalf("two keys' kids: %q and %q, want distinct and set", kid, keyID(t, key))
	}
	tok, err = mint.Sign(other, mint.Claims{Issuer: "iss", Audience: "aud", Subject: "alice", Expires: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), tok); !errors.Is(err, identity.ErrUnknownKey) {
		t.Fatalf("another key's token: %v, want ErrUnknownKey", err)
	}
}

func keyID(t *testing.T, k jwk.Key) string {
	t.Helper()
	kid, _ := k.KeyID()
	return kid
}

// TestParseKeyRefuses: ParseKey says what it was given instead of a signing key.
func TestParseKeyRefuses(t *testing.T) {
	t.Parallel()
	key, err := mint.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	jwks, _ := mint.KeySet(key)
	pub, _ := key.PublicKey()
	public, _ := json.Marshal(pub)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	k384, _ := jwk.Import(p384)
	_ = k384.Set(jwk.KeyIDKey, "k384")
	other, _ := json.Marshal(k384)
	noKID, _ := key.Clone()
	_ = noKID.Remove(jwk.KeyIDKey)
	anonymous, _ := json.Marshal(noKID)
	tests := []struct {
		name, raw, says string
	}{
		{"JWKS", string(jwks), "key set (JWKS)"},
		{"public key", string(public), "public key"},
		{"P-384", string(other), "P-384"},
		{"no kid", string(anonymous), "no kid"},
		{"symmetric", `{"kty":"oct","kid":"s","k":"c2VjcmV0"}`, "oct key"},
		{"garbage", "-----BEGIN PRIVATE KEY-----", "not a JWK"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := mint.ParseKey([]byte(tt.raw))
			if !errors.Is(err, mint.ErrNotSigningKey) || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("ParseKey = %v, want ErrNotSigningKey saying %q", err, tt.says)
			}
		})
	}
}

// TestWriteFileModes: the file has the mode asked for, whatever the umask, and replaces an
// older one whole.
func TestWriteFileModes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, mode := range []os.FileMode{0o600, 0o644} {
		path := filepath.Join(dir, mode.String())
		if err := os.WriteFile(path, []byte("an older, longer content"), 0o666); err != nil {
			t.Fatal(err)
		}
		if err := mint.WriteFile(path, []byte("new"), mode); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("mode %v, want %v", fi.Mode().Perm(), mode)
		}
		if b, _ := os.ReadFile(path); string(b) != "new" {
			t.Errorf("content %q, want new", b)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("%d files in the directory, want 2 (no temporary file left)", len(entries))
	}
}
