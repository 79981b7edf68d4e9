package cluster

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/identity"
)

// TestIdentity: the tokens the harness mints are what a replica configured by Env accepts,
// one per customer, the same each time it is asked; the tokens file holds them in order.
func TestIdentity(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	id, err := NewIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, kv := range id.Env() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if env["STOCKSVC_CUSTOMER_AUTH"] != "token" || env["STOCKSVC_JWKS_FILE"] != filepath.Join(dir, "jwks.json") {
		t.Fatalf("Env() = %v", id.Env())
	}
	v, err := identity.NewVerifier(context.Background(), identity.Config{Issuer: env["STOCKSVC_JWT_ISSUER"], Audience: env["STOCKSVC_JWT_AUDIENCE"],
		JWKSFile: env["STOCKSVC_JWKS_FILE"], Leeway: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	a, err := id.Token("c-1")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := id.Token("c-1"); again != a {
		t.Errorf("a customer's second token differs from the first")
	}
	if got, err := v.Verify(context.Background(), a); err != nil || got != "c-1" {
		t.Errorf("Verify = %q, %v; want c-1", got, err)
	}
	path := filepath.Join(dir, "tokens.json")
	if err := id.WriteTokens(path, []string{"c-0", "c-1"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tokens []string
	if err := json.Unmarshal(b, &tokens); err != nil || len(tokens) != 2 || tokens[1] != a {
		t.Fatalf("tokens file = %s (%v), want two tokens, c-1's second", b, err)
	}
	var subjects []string
	for _, tok := range tokens {
		sub, err := v.Verify(context.Background(), tok)
		if err != nil {
			t.Fatal(err)
		}
		subjects = append(subjects, sub)
	}
	if !slices.Equal(subjects, []string{"c-0", "c-1"}) {
		t.Errorf("subjects = %v", subjects)
	}
}
