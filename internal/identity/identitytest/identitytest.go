// Package identitytest mints customer tokens for tests and the load harness: an Issuer holds
// signing keys, publishes their JWKS (as bytes, or in a file that identity.Verifier reads
// again when it changes) and signs tokens whose subject is a customer. Rotate adds a new
// signing key while keeping the old ones in the JWKS, as a real issuer does during a rotation.
// The keys, the JWKS and the signing are package mint's, which stocksvc devkeys and stocksvc
// token use too.
//
// It has no testing import in its API, so that the load harness (a module of its own) can use
// it; its keys are made fresh in memory and never leave the process but through JWKS (public
// halves only).
package identitytest

import (
	"fmt"
	"sync"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/stocksvc/stocksvc/internal/identity/mint"
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
// holds it beside every older key. Errors: a failure to make the key.
func (is *Issuer) Rotate() error {
	key, err := mint.NewKey()
	if err != nil {
		return fmt.Errorf("identitytest: %w", err)
	}
	is.mu.Lock()
	defer is.mu.Unlock()
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
	b, err := mint.KeySet(is.keys...)
	if err != nil {
		panic(fmt.Sprintf("identitytest: %v", err))
	}
	return b
}

// WriteJWKS writes JWKS to path atomically (mint.WriteFile), so that a reader never sees it
// half written. Errors: the file system's.
func (is *Issuer) WriteJWKS(path string) error {
	if err := mint.WriteFile(path, is.JWKS(), 0o644); err != nil {
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
type Claims = mint.Claims

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
	is.mu.Lock()
	key := is.keys[len(is.keys)-1]
	is.mu.Unlock()
	tok, err := mint.SignWithHeader(key, c, header)
	if err != nil {
		return "", fmt.Errorf("identitytest: %w", err)
	}
	return tok, nil
}
