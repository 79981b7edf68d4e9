// Package identitytest mints customer tokens for tests and the load harness: an Issuer holds
// signing keys, publishes their JWKS (as bytes, or in a file that identity.Verifier reads
// again when it changes) and signs tokens whose subject is a customer. Rotate adds a new
// signing key while keeping the old ones in the JWKS, as a real issuer does during a rotation.
//
// It has no testing import in its API, so that the load harness (a module of its own) can use
// it; its keys are made fresh in memory and never leave the process but through JWKS (public
// halves only).
package identitytest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/lestrrat-go/jwx/v3/jwt"
)

// Issuer signs customer tokens with ES256 keys, each with a kid. It is safe for concurrent
// use.
type Issuer struct {
	issuer, audience string

	mu   sync.Mutex
	keys []jwk.Key // private keys, oldest first; the last one signs
}

// NewIssuer returns an Issuer whose tokens carry iss issuer and aud audience, with one signing
// key. Errors: a failure to make or import the key.
func NewIssuer(issuer, audience string) (*Issuer, error) {
	is := &Issuer{issuer: issuer, audience: audience}
	if err := is.Rotate(); err != nil {
		return nil, err
	}
	return is, nil
}

// Rotate makes a new signing key: tokens minted from now on are signed with it, and the JWKS
// holds it beside every older key. Errors: a failure to make or import the key.
func (is *Issuer) Rotate() error {
	raw, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("identitytest: generate key: %w", err)
	}
	key, err := jwk.Import(raw)
	if err != nil {
		return fmt.Errorf("identitytest: import key: %w", err)
	}
	is.mu.Lock()
	defer is.mu.Unlock()
	kid := "k" + strconv.Itoa(len(is.keys)+1) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	for name, v := range map[string]any{jwk.KeyIDKey: kid, jwk.AlgorithmKey: jwa.ES256(), jwk.KeyUsageKey: "sig"} {
		if err := key.Set(name, v); err != nil {
			return fmt.Errorf("identitytest: set %s: %w", name, err)
		}
	}
	is.keys = append(is.keys, key)
	return nil
}

// KeyID returns the kid of the key that signs now.
func (is *Issuer) KeyID() string {
	is.mu.Lock()
	defer is.mu.Unlock()
	kid, _ := is.keys[len(is.keys)-1].KeyID()
	return kid
}

// JWKS returns the public halves of every key, oldest first, as a JWKS document. It panics
// only if a key it made cannot be encoded, which would be a bug of this package.
func (is *Issuer) JWKS() []byte {
	is.mu.Lock()
	defer is.mu.Unlock()
	set := jwk.NewSet()
	for _, k := range is.keys {
		pub, err := k.PublicKey()
		if err != nil {
			panic(fmt.Sprintf("identitytest: public key: %v", err))
		}
		if err := set.AddKey(pub); err != nil {
			panic(fmt.Sprintf("identitytest: add key: %v", err))
		}
	}
	b, err := json.Marshal(set)
	if err != nil {
		panic(fmt.Sprintf("identitytest: encode JWKS: %v", err))
	}
	return b
}

// WriteJWKS writes JWKS to path atomically: to a new file beside it, renamed over it, so
// that a reader never sees it half written. Errors: the file system's.
func (is *Issuer) WriteJWKS(path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".jwks-*")
	if err != nil {
		return fmt.Errorf("identitytest: %w", err)
	}
	defer os.Remove(tmp.Name()) // gone after the rename; a leftover on failure
	if _, err := tmp.Write(is.JWKS()); err != nil {
		tmp.Close()
		return fmt.Errorf("identitytest: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("identitytest: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("identitytest: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("identitytest: %w", err)
	}
	return nil
}

// Token returns a token for customer, valid from now for ttl: iss, aud, sub, iat, nbf and
// exp set, signed by the current key. Errors: a failure to sign.
func (is *Issuer) Token(customer string, ttl time.Duration) (string, error) {
	now := time.Now()
	return is.Sign(Claims{Subject: customer, IssuedAt: now, NotBefore: now, Expires: now.Add(ttl)})
}

// Claims are the claims of a token Sign makes. Zero Issuer and Audience take the Issuer's;
// zero times leave their claim out.
type Claims struct {
	Issuer    string
	Audience  string
	Subject   string
	IssuedAt  time.Time
	NotBefore time.Time
	Expires   time.Time
}

// Sign returns a token with exactly the claims c says, signed by the current key: for tests
// of what a verifier refuses (another issuer, an expired token, no subject). Errors: a
// failure to build or sign.
func (is *Issuer) Sign(c Claims) (string, error) { return is.SignWithHeader(c, nil) }

// SignWithHeader is Sign with more protected header parameters than alg, kid and typ (crit,
// say): for tests of what a verifier refuses in a header. Errors: a failure to build or sign.
func (is *Issuer) SignWithHeader(c Claims, header map[string]any) (string, error) {
	if c.Issuer == "" {
		c.Issuer = is.issuer
	}
	if c.Audience == "" {
		c.Audience = is.audience
	}
	b := jwt.NewBuilder().Issuer(c.Issuer).Audience([]string{c.Audience})
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
		return "", fmt.Errorf("identitytest: build token: %w", err)
	}
	is.mu.Lock()
	key := is.keys[len(is.keys)-1]
	is.mu.Unlock()
	hdr := jws.NewHeaders()
	for name, v := range header {
		if err := hdr.Set(name, v); err != nil {
			return "", fmt.Errorf("identitytest: header %s: %w", name, err)
		}
	}
	signed, err := jwt.Sign(tok, jwt.WithKey(jwa.ES256(), key, jws.WithProtectedHeaders(hdr)))
	if err != nil {
		return "", fmt.Errorf("identitytest: sign: %w", err)
	}
	return string(signed), nil
}
