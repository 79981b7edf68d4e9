// Package mint makes ES256 signing keys, publishes their public halves as a JWKS, and signs
// customer tokens with them: what an identity provider does, in the small. The development
// commands (stocksvc devkeys, stocksvc token) and the tests' issuer (identitytest) share it.
//
// Its keys are for trying the service and for tests. In production the identity provider
// signs the tokens and publishes its JWKS; the service holds no private key.
package mint

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/lestrrat-go/jwx/v3/jwt"
)

// ErrNotSigningKey is a key ParseKey cannot sign with: not a JWK, a public key (a JWKS
// included), another key type or curve, or one without a kid.
var ErrNotSigningKey = errors.New("mint: not an ES256 signing key")

// NewKey returns a new ES256 signing key (ECDSA on P-256) as a private JWK, with alg ES256,
// use sig and, as kid, its RFC 7638 thumbprint: the kid a token names its key by. Errors: a
// failure to make or import the key.
func NewKey() (jwk.Key, error) {
	raw, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("mint: generate key: %w", err)
	}
	key, err := jwk.Import(raw)
	if err != nil {
		return nil, fmt.Errorf("mint: import key: %w", err)
	}
	thumbprint, err := key.Thumbprint(crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("mint: thumbprint: %w", err)
	}
	for _, f := range []struct {
		name  string
		value any
	}{
		{jwk.KeyIDKey, base64.RawURLEncoding.EncodeToString(thumbprint)},
		{jwk.AlgorithmKey, jwa.ES256()},
		{jwk.KeyUsageKey, "sig"},
	} {
		if err := key.Set(f.name, f.value); err != nil {
			return nil, fmt.Errorf("mint: set %s: %w", f.name, err)
		}
	}
	return key, nil
}

// ParseKey reads a signing key as NewKey makes it and json.Marshal writes it: a private EC
// P-256 JWK with a kid. Errors: ErrNotSigningKey, saying what raw is instead.
func ParseKey(raw []byte) (jwk.Key, error) {
	key, err := jwk.ParseKey(raw)
	if err != nil {
		if set, serr := jwk.Parse(raw); serr == nil && set.Len() > 0 {
			return nil, fmt.Errorf("%w: a key set (JWKS) of %d key(s), which holds public keys only", ErrNotSigningKey, set.Len())
		}
		return nil, fmt.Errorf("%w: not a JWK: %w", ErrNotSigningKey, err)
	}
	ec, ok := key.(jwk.ECDSAPrivateKey)
	if !ok {
		if _, public := key.(jwk.ECDSAPublicKey); public {
			return nil, fmt.Errorf("%w: a public key", ErrNotSigningKey)
		}
		return nil, fmt.Errorf("%w: a %s key", ErrNotSigningKey, key.KeyType())
	}
	if crv, _ := ec.Crv(); crv != jwa.P256() {
		return nil, fmt.Errorf("%w: curve %s, not P-256", ErrNotSigningKey, crv)
	}
	if kid, _ := key.KeyID(); kid == "" {
		return nil, fmt.Errorf("%w: no kid", ErrNotSigningKey)
	}
	return key, nil
}

// KeySet returns the JWKS of the public halves of keys, in their order: what a verifier
// reads. Errors: a key with no public half, or one the set refuses.
func KeySet(keys ...jwk.Key) ([]byte, error) {
	set := jwk.NewSet()
	for _, k := range keys {
		pub, err := k.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("mint: public key: %w", err)
		}
		if err := set.AddKey(pub); err != nil {
			return nil, fmt.Errorf("mint: add key: %w", err)
		}
	}
	b, err := json.Marshal(set)
	if err != nil {
		return nil, fmt.Errorf("mint: encode JWKS: %w", err)
	}
	return b, nil
}

// Claims are the claims of a token Sign makes. Empty strings and zero times leave their
// claim out, for tests of what a verifier refuses.
type Claims struct {
	Issuer    string
	Audience  string
	Subject   string
	IssuedAt  time.Time
	NotBefore time.Time
	Expires   time.Time
}

// Sign returns a compact JWT with exactly the claims c says, signed with key (ES256), whose
// kid the header names. Errors: a failure to build or sign.
func Sign(key jwk.Key, c Claims) (string, error) { return SignWithHeader(key, c, nil) }

// SignWithHeader is Sign with more protected header parameters than alg, kid and typ (crit,
// say): for tests of what a verifier refuses in a header. Errors: a failure to build, to set a
// parameter, or to sign.
func SignWithHeader(key jwk.Key, c Claims, header map[string]any) (string, error) {
	b := jwt.NewBuilder()
	if c.Issuer != "" {
		b = b.Issuer(c.Issuer)
	}
	if c.Audience != "" {
		b = b.Audience([]string{c.Audience})
	}
	if c.Subject != "" {
		b = b.Subject(c.Subject)
	}
	if !c.IssuedAt.IsZero() {
		b = b.IssuedAt(c.IssuedAt)
	}
	if !c.NotBefore.IsZero() {
		b = b.NotBefore(c.NotBefore)
	}
	if !c.Expires.IsZero() {
		b = b.Expiration(c.Expires)
	}
	tok, err := b.Build()
	if err != nil {
		return "", fmt.Errorf("mint: build token: %w", err)
	}
	hdr := jws.NewHeaders()
	for name, v := range header {
		if err := hdr.Set(name, v); err != nil {
			return "", fmt.Errorf("mint: header %s: %w", name, err)
		}
	}
	signed, err := jwt.Sign(tok, jwt.WithKey(jwa.ES256(), key, jws.WithProtectedHeaders(hdr)))
	if err != nil {
		return "", fmt.Errorf("mint: sign: %w", err)
	}
	return string(signed), nil
}

// WriteFile writes data to path with permissions perm, atomically: to a new file beside it,
// renamed over it, so that a reader (a verifier watching a JWKS file) never sees it half
// written, and a private key is never readable by others, even for a moment. Errors: the
// file system's.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*") // mode 0600
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // gone after the rename; a leftover on failure
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
