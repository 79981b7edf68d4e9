package identity_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/identity"
	"github.com/stocksvc/stocksvc/internal/identity/identitytest"
)

// BenchmarkVerify is what a token costs the Verifier, by how it is answered: from memory
// (verified before, or refused before), after a signature check (verified, or refused for its
// signature), or by a pre-check (a kid no key has). docs/benchmarks.md §6 gives the ratios.
//
//	go test -run XXX -bench Verify ./internal/identity
func BenchmarkVerify(b *testing.B) {
	is, err := identitytest.NewIssuer(issuer, audience)
	if err != nil {
		b.Fatal(err)
	}
	other, err := identitytest.NewIssuer(issuer, audience)
	if err != nil {
		b.Fatal(err)
	}
	valid := identitytest.Claims{Subject: "alice", Expires: time.Now().Add(time.Hour)}
	sign := func(is *identitytest.Issuer, who string) string {
		c := valid
		c.Subject = who
		tok, err := is.Sign(c)
		if err != nil {
			b.Fatal(err)
		}
		return tok
	}
	// forge puts another key's signature under the issuer's kid: known kid, bad signature.
	forge := func(who string) string {
		p := strings.Split(sign(is, who), ".")
		return p[0] + "." + p[1] + "." + strings.Split(sign(other, who), ".")[2]
	}
	cases := []struct {
		name string
		// tokens are sent in turn; with a memory of one token, two in turn are never
		// remembered.
		tokens   []string
		remember int
		want     error
	}{
		{"remembered", []string{sign(is, "alice")}, 0, nil},
		{"remembered-refusal", []string{forge("alice")}, 0, identity.ErrBadSignature},
		{"fresh", []string{sign(is, "alice"), sign(is, "bob")}, 1, nil},
		{"fresh-bad-signature", []string{forge("alice"), forge("bob")}, 1, identity.ErrBadSignature},
		{"precheck-unknown-kid", []string{sign(other, "alice")}, 0, identity.ErrUnknownKey},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			v, _ := fileVerifier(b, is, func(cfg *identity.Config) {
				cfg.Remember, cfg.RememberRefused = c.remember, c.remember
				cfg.FileCheck = time.Hour // an unknown kid looks at the file at most this often
			})
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_, err := v.Verify(ctx, c.tokens[i%len(c.tokens)])
				i++
				if !errors.Is(err, c.want) {
					b.Fatalf("Verify: %v, want %v", err, c.want)
				}
			}
		})
	}
}
