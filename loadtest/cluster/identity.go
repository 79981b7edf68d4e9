package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/stocksvc/stocksvc/internal/identity/identitytest"
)

// Identity is who the replicas of a deployment believe customers are: an issuer of the run's
// own (identitytest) whose JWKS the replicas read from a file, and the tokens it minted, one a
// customer, kept for the run. Replicas of a deployment with an Identity verify tokens
// (STOCKSVC_CUSTOMER_AUTH=token); without one they take the body's customer_id (body).
type Identity struct {
	Issuer, Audience string
	JWKSPath         string
	issuer           *identitytest.Issuer
	ttl              time.Duration

	mu     sync.Mutex
	tokens map[string]string
}

// tokenTTL outlives any run: a token that expired mid-run would be a finding about the harness.
const tokenTTL = 24 * time.Hour

// NewIdentity makes an issuer and writes its JWKS to dir/jwks.json.
func NewIdentity(dir string) (*Identity, error) {
	id := &Identity{Issuer: "https://issuer.loadtest.invalid", Audience: "stocksvc-loadtest", JWKSPath: filepath.Join(dir, "jwks.json"),
		ttl: tokenTTL, tokens: map[string]string{}}
	var err error
	if id.issuer, err = identitytest.NewIssuer(id.Issuer, id.Audience); err != nil {
		return nil, err
	}
	if err := id.issuer.WriteJWKS(id.JWKSPath); err != nil {
		return nil, err
	}
	return id, nil
}

// Env is what a replica needs to verify the tokens.
func (id *Identity) Env() []string {
	return []string{"STOCKSVC_CUSTOMER_AUTH=token", "STOCKSVC_JWKS_FILE=" + id.JWKSPath,
		"STOCKSVC_JWT_ISSUER=" + id.Issuer, "STOCKSVC_JWT_AUDIENCE=" + id.Audience}
}

// Token returns customer's token, minting it the first time.
func (id *Identity) Token(customer string) (string, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if t, ok := id.tokens[customer]; ok {
		return t, nil
	}
	t, err := id.issuer.Token(customer, id.ttl)
	if err != nil {
		return "", err
	}
	id.tokens[customer] = t
	return t, nil
}

// WriteTokens writes the tokens of customers, in their order, to path as a JSON array: what
// the k6 scripts read (TOKENS_FILE), since k6 cannot sign ES256 tokens itself.
func (id *Identity) WriteTokens(path string, customers []string) error {
	out := make([]string, len(customers))
	for i, c := range customers {
		t, err := id.Token(c)
		if err != nil {
			return fmt.Errorf("mint a token for %s: %w", c, err)
		}
		out[i] = t
	}
	b, _ := json.Marshal(out)
	return os.WriteFile(path, b, 0o644)
}
