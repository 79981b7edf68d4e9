package identity_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/stocksvc/stocksvc/internal/identity"
	"github.com/stocksvc/stocksvc/internal/identity/identitytest"
)

// A verifier over a JWKS file, and a token minted by identitytest's issuer: the customer is the
// token's subject. After a rotation the file is rewritten, and the new key's tokens verify
// without a new Verifier.
func ExampleVerifier() {
	dir, err := os.MkdirTemp("", "jwks")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	jwks := filepath.Join(dir, "jwks.json")

	issuer, err := identitytest.NewIssuer("https://id.example", "stocksvc")
	if err != nil {
		panic(err)
	}
	if err := issuer.WriteJWKS(jwks); err != nil {
		panic(err)
	}
	v, err := identity.NewVerifier(context.Background(), identity.Config{
		Issuer: "https://id.example", Audience: "stocksvc", JWKSFile: jwks, Leeway: 30 * time.Second})
	if err != nil {
		panic(err)
	}
	defer v.Close()

	token, _ := issuer.Token("alice", time.Minute)
	customer, err := v.Verify(context.Background(), token)
	fmt.Println(customer, err)

	_ = issuer.Rotate()
	_ = issuer.WriteJWKS(jwks)
	token, _ = issuer.Token("bob", time.Minute)
	customer, err = v.Verify(context.Background(), token)
	fmt.Println(customer, err)

	_, err = v.Verify(context.Background(), "")
	fmt.Println(err)
	// Output:
	// alice <nil>
	// bob <nil>
	// identity: unauthenticated: no credential
}
