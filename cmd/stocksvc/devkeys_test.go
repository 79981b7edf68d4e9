package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwt"

	"github.com/stocksvc/stocksvc/internal/identity"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// tool runs stocksvc with args (a development tool: no environment) and returns what it
// printed on stdout and stderr.
func tool(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = run(context.Background(), func() {}, args, envOf(nil), stdio{stdout: &out, stderr: &errOut})
	return out.String(), errOut.String(), err
}

// devKeys runs stocksvc devkeys -out dir and returns its paths and what it printed.
func devKeys(t *testing.T, dir string, args ...string) (key, jwks, printed string) {
	t.Helper()
	out, _, err := tool(t, append([]string{"devkeys", "-out", dir}, args...)...)
	if err != nil {
		t.Fatalf("devkeys: %v", err)
	}
	return filepath.Join(dir, devKeyFile), filepath.Join(dir, devJWKSFile), out
}

// mintToken runs stocksvc token and returns the token it printed.
func mintToken(t *testing.T, args ...string) string {
	t.Helper()
	out, _, err := tool(t, append([]string{"token"}, args...)...)
	if err != nil {
		t.Fatalf("token %q: %v", args, err)
	}
	tok, rest, _ := strings.Cut(out, "\n")
	if tok == "" || rest != "" {
		t.Fatalf("token printed %q, want one line: the token", out)
	}
	return tok
}

func devVerifier(t *testing.T, jwks string) *identity.Verifier {
	t.Helper()
	v, err := identity.NewVerifier(context.Background(), identity.Config{Issuer: devIssuer, Audience: devAudience, JWKSFile: jwks})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	return v
}

// TestDevKeysFiles: devkeys writes the private key 0600 and the key set 0644, prints neither
// the private key nor anything but where they are, how to serve with them and that they are
// not for production, and refuses to replace a key unless told to keep it.
func TestDevKeysFiles(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "keys")
	key, jwks, printed := devKeys(t, dir)
	for path, want := range map[string]os.FileMode{key: 0o600, jwks: 0o644} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode().Perm(), want)
		}
	}
	var private struct {
		D string `json:"d"`
	}
	raw, _ := os.ReadFile(key)
	if err := json.Unmarshal(raw, &private); err != nil || private.D == "" {
		t.Fatalf("%s holds no private key: %s (%v)", key, raw, err)
	}
	if strings.Contains(printed, private.D) {
		t.Errorf("devkeys printed the private key:\n%s", printed)
	}
	if set, _ := os.ReadFile(jwks); strings.Contains(string(set), `"d"`) {
		t.Errorf("the key set holds a private part: %s", set)
	}
	for _, want := range []string{key, jwks, "not for production", "STOCKSVC_JWKS_FILE=" + jwks, "STOCKSVC_JWT_ISSUER=" + devIssuer, "STOCKSVC_JWT_AUDIENCE=" + devAudience} {
		if !strings.Contains(printed, want) {
			t.Errorf("devkeys printed no %q:\n%s", want, printed)
		}
	}

	// Again: refused, the key untouched.
	if _, _, err := tool(t, "devkeys", "-out", dir); err == nil || !strings.Contains(err.Error(), "-keep") {
		t.Fatalf("devkeys over an existing key = %v, want a refusal naming -keep", err)
	}
	if again, _ := os.ReadFile(key); !bytes.Equal(again, raw) {
		t.Fatal("a refused devkeys changed the key")
	}
	// -keep: the same key, and its key set written again (elsewhere, with -jwks).
	elsewhere := filepath.Join(t.TempDir(), "public", "jwks.json")
	_, _, printed = devKeys(t, dir, "-keep", "-jwks", elsewhere)
	if again, _ := os.ReadFile(key); !bytes.Equal(again, raw) {
		t.Fatal("devkeys -keep changed the key")
	}
	if !strings.Contains(printed, "kept the signing key") {
		t.Errorf("devkeys -keep printed:\n%s", printed)
	}
	v := devVerifier(t, elsewhere)
	if got, err := v.Verify(context.Background(), mintToken(t, "-key", key, "-sub", "alice")); err != nil || got != "alice" {
		t.Fatalf("a token of the kept key against the key set written again: %q, %v", got, err)
	}
}

// TestTokenVerifies: a token stocksvc token mints is accepted by the service's Verifier over
// devkeys' key set, for the customer it names, for -ttl; a token of another key set, issuer
// or audience, or an expired one, is refused.
func TestTokenVerifies(t *testing.T) {
	t.Parallel()
	key, jwks, _ := devKeys(t, t.TempDir())
	v := devVerifier(t, jwks)
	tok := mintToken(t, "-key", key, "-sub", "alice", "-ttl", "5m")
	if got, err := v.Verify(context.Background(), tok); err != nil || got != "alice" {
		t.Fatalf("Verify = %q, %v; want alice", got, err)
	}
	parsed, err := jwt.ParseInsecure([]byte(tok))
	if err != nil {
		t.Fatal(err)
	}
	iat, _ := parsed.IssuedAt()
	exp, _ := parsed.Expiration()
	if got := exp.Sub(iat); got != 5*time.Minute {
		t.Errorf("exp - iat = %v, want -ttl's 5m", got)
	}

	otherKey, _, _ := devKeys(t, t.TempDir())
	tests := []struct {
		name string
		args []string
		want error
	}{
		{"another key", []string{"-key", otherKey, "-sub", "alice"}, identity.ErrUnknownKey},
		{"another issuer", []string{"-key", key, "-sub", "alice", "-iss", "https://id.example"}, identity.ErrWrongIssuer},
		{"another audience", []string{"-key", key, "-sub", "alice", "-aud", "shop"}, identity.ErrWrongAudience},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := v.Verify(context.Background(), mintToken(t, tt.args...)); !errors.Is(err, tt.want) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
		})
	}
}

// TestDevToolsRefuse: bad flags and missing or wrong keys fail with a message that says what
// is wrong, and print no token.
func TestDevToolsRefuse(t *testing.T) {
	t.Parallel()
	key, jwks, _ := devKeys(t, t.TempDir())
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no subject", []string{"token", "-key", key}, "-sub is required"},
		{"subject not a customer id", []string{"token", "-key", key, "-sub", "al\x07ice"}, `-sub "al\aice": not a customer id`},
		{"subject too long", []string{"token", "-key", key, "-sub", strings.Repeat("a", 65)}, "at most 64 characters"},
		{"ttl not positive", []string{"token", "-key", key, "-sub", "a", "-ttl", "0s"}, "-ttl 0s: must be positive"},
		{"empty issuer", []string{"token", "-key", key, "-sub", "a", "-iss", ""}, "-iss and -aud must not be empty"},
		{"every flag wrong at once", []string{"token", "-ttl", "-1s", "-aud", ""}, "-sub is required"},
		{"no key", []string{"token", "-key", filepath.Join(t.TempDir(), "none.jwk"), "-sub", "a"}, "make one with stocksvc devkeys"},
		{"the key set for the key", []string{"token", "-key", jwks, "-sub", "a"}, "a key set (JWKS)"},
		{"unknown flag", []string{"token", "-subject", "a"}, "token: flag provided but not defined: -subject"},
		{"arguments", []string{"token", "-key", key, "-sub", "a", "extra"}, `unexpected arguments ["extra"]`},
		{"devkeys arguments", []string{"devkeys", "-out", t.TempDir(), "now"}, `devkeys: unexpected arguments ["now"]`},
		{"devkeys -jwks under a file", []string{"devkeys", "-out", filepath.Dir(jwks), "-keep", "-jwks", jwks + "/x"}, "not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, _, err := tool(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("%q = %v, want an error containing %q", tt.args, err, tt.want)
			}
			if out != "" {
				t.Errorf("%q printed %q on stdout", tt.args, out)
			}
		})
	}
	// -h is help, not a failure.
	for _, command := range []string{"devkeys", "token"} {
		_, usage, err := tool(t, command, "-h")
		if err != nil || !strings.Contains(usage, "not for production") {
			t.Errorf("%s -h = %v, usage %q; want success and a usage saying the keys are not for production", command, err, usage)
		}
	}
}

// TestDevKeysServe: the settings devkeys prints serve token mode, and a token stocksvc token
// mints with the defaults buys as its customer: the path the README and first-order.sh take.
func TestDevKeysServe(t *testing.T) {
	t.Parallel()
	key, _, printed := devKeys(t, t.TempDir())
	_, prefix := testenv.Redis(t)
	settings := map[string]string{}
	for _, line := range strings.Split(printed, "\n") {
		if !strings.HasPrefix(line, "  STOCKSVC_") {
			continue
		}
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, "=")
			settings[k] = v
		}
	}
	if settings["STOCKSVC_CUSTOMER_AUTH"] != "token" {
		t.Fatalf("devkeys printed no token-mode settings:\n%s", printed)
	}
	env := serveEnv(t, prefix, settings)
	in := startRun(t, env)
	id := in.createProduct(t, env["STOCKSVC_ADMIN_TOKEN"], "devkeys", 2)
	bearer := http.Header{"Authorization": {"Bearer " + mintToken(t, "-key", key, "-sub", "alice")}}
	res := in.call(t, http.MethodPost, "/v1/orders", map[string]any{"items": []map[string]any{{"product_id": id, "quantity": 1}}}, bearer)
	var o struct {
		CustomerID string `json:"customer_id"`
	}
	if err := json.Unmarshal(res.Body, &o); res.Status != http.StatusCreated || err != nil || o.CustomerID != "alice" {
		t.Fatalf("order with alice's development token: status %d, %v: %s; want 201 for alice", res.Status, err, res.Body)
	}
}

// TestComposeDevKeys: the Compose stack's replicas verify, by default, the tokens stocksvc
// token mints by default, against the key set its devkeys service writes.
func TestComposeDevKeys(t *testing.T) {
	t.Parallel()
	compose, err := os.ReadFile(filepath.Join("..", "..", "deploy", "docker-compose.yml"))
	if err != nil {
		t.Fatalf("read the Compose file: %v", err)
	}
	find := func(re string) string {
		t.Helper()
		m := regexp.MustCompile(re).FindSubmatch(compose)
		if m == nil {
			t.Fatalf("no %s in deploy/docker-compose.yml", re)
		}
		return string(m[1])
	}
	for setting, want := range map[string]string{
		`STOCKSVC_CUSTOMER_AUTH:\s*\$\{STOCKSVC_CUSTOMER_AUTH:-(\S+)\}`: "token",
		`STOCKSVC_JWT_ISSUER:\s*\$\{STOCKSVC_JWT_ISSUER:-(\S+)\}`:       devIssuer,
		`STOCKSVC_JWT_AUDIENCE:\s*\$\{STOCKSVC_JWT_AUDIENCE:-(\S+)\}`:   devAudience,
		`STOCKSVC_JWKS_FILE:\s*\$\{STOCKSVC_JWKS_FILE-(\S+)\}`:          find(`command: \["devkeys",.*"-jwks", "([^"]+)"`),
	} {
		if got := find(setting); got != want {
			t.Errorf("%s: default %q, want %q", setting, got, want)
		}
	}
}
