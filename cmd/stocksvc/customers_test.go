package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/identity/identitytest"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// TestCheckCustomerAuth: serving in token mode needs the issuer, the audience and exactly one
// source of keys; the other modes need none of them.
func TestCheckCustomerAuth(t *testing.T) {
	t.Parallel()
	full := map[string]string{"STOCKSVC_JWT_ISSUER": "https://id.test", "STOCKSVC_JWT_AUDIENCE": "shop", "STOCKSVC_JWKS_FILE": "/run/jwks.json"}
	with := func(extra map[string]string) map[string]string {
		env := map[string]string{}
		for k, v := range full {
			env[k] = v
		}
		for k, v := range extra {
			if v == "" {
				delete(env, k)
			} else {
				env[k] = v
			}
		}
		return env
	}
	tests := []struct {
		name string
		env  map[string]string
		want []string // nothing: accepted
	}{
		{"token with a file", full, nil},
		{"token with a URL", with(map[string]string{"STOCKSVC_JWKS_FILE": "", "STOCKSVC_JWKS_URL": "http://127.0.0.1:1/jwks"}), nil},
		{"token without anything", nil, []string{"STOCKSVC_JWT_ISSUER", "STOCKSVC_JWT_AUDIENCE", "STOCKSVC_JWKS_FILE or STOCKSVC_JWKS_URL"}},
		{"token without an issuer", with(map[string]string{"STOCKSVC_JWT_ISSUER": ""}), []string{"STOCKSVC_JWT_ISSUER: required"}},
		{"token without an audience", with(map[string]string{"STOCKSVC_JWT_AUDIENCE": ""}), []string{"STOCKSVC_JWT_AUDIENCE: required"}},
		{"token with a file and a URL", with(map[string]string{"STOCKSVC_JWKS_URL": "http://127.0.0.1:1/jwks"}), []string{"both are set"}},
		{"gateway needs no keys", map[string]string{"STOCKSVC_CUSTOMER_AUTH": "gateway"}, nil},
		{"body needs no keys", map[string]string{"STOCKSVC_CUSTOMER_AUTH": "body"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _, err := loadConfig(nil, envOf(tt.env), &bytes.Buffer{})
			if err != nil {
				t.Fatalf("loadConfig: %v (token mode's needs are checked before serving, not here)", err)
			}
			err = c.checkCustomerAuth()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("checkCustomerAuth = %v, want nil", err)
				}
				return
			}
			for _, want := range tt.want {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("checkCustomerAuth = %v, want it to name %q", err, want)
				}
			}
		})
	}
}

// TestRunTokenModeNeedsItsSettings: serving in token mode without its settings fails at once,
// before listening; migrating does not need them (TestRunRejectsBadInvocations covers the
// commands' other checks).
func TestRunTokenModeNeedsItsSettings(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	err := run(context.Background(), func() {}, nil, envOf(map[string]string{"STOCKSVC_ADDR": "127.0.0.1:0"}), stdio{stdout: &bytes.Buffer{}, stderr: &stderr})
	if err == nil || !strings.Contains(err.Error(), "STOCKSVC_JWT_ISSUER") {
		t.Fatalf("run in token mode without its settings = %v, want an error naming STOCKSVC_JWT_ISSUER", err)
	}
	if stderr.Len() != 0 {
		t.Errorf("run logged before refusing:\n%s", stderr.String())
	}
}

// TestRunTokenMode serves with customer tokens: the start-up log names the mode, an order
// without a token is 401, one with a token is the token's subject's, and another customer
// does not see it.
func TestRunTokenMode(t *testing.T) {
	t.Parallel()
	is, err := identitytest.NewIssuer("https://id.test", "shop")
	if err != nil {
		t.Fatal(err)
	}
	jwks := filepath.Join(t.TempDir(), "jwks.json")
	if err := is.WriteJWKS(jwks); err != nil {
		t.Fatal(err)
	}
	_, prefix := testenv.Redis(t)
	env := serveEnv(t, prefix, map[string]string{
		"STOCKSVC_CUSTOMER_AUTH": "token",
		"STOCKSVC_JWKS_FILE":     jwks,
		"STOCKSVC_JWT_ISSUER":    "https://id.test",
		"STOCKSVC_JWT_AUDIENCE":  "shop",
	})
	in := startRun(t, env)
	if rec, ok := in.Logs.find("customer identity"); !ok || rec["customer_auth"] != "token" || rec["jwks_file"] != jwks || rec["level"] != "INFO" {
		t.Errorf("customer identity line = %v, want token mode with the JWKS file, at INFO", rec)
	}
	id := in.createProduct(t, env["STOCKSVC_ADMIN_TOKEN"], "token-mode", 5)
	order := map[string]any{"items": []map[string]any{{"product_id": id, "quantity": 1}}}
	if res := in.call(t, http.MethodPost, "/v1/orders", order, nil); res.Status != http.StatusUnauthorized {
		t.Fatalf("order without a token: status %d, want 401: %s", res.Status, res.Body)
	}
	bearer := func(customer string) http.Header {
		tok, err := is.Token(customer, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return http.Header{"Authorization": {"Bearer " + tok}}
	}
	res := in.call(t, http.MethodPost, "/v1/orders", order, bearer("kim"))
	var o struct {
		ID         string `json:"id"`
		CustomerID string `json:"customer_id"`
	}
	if err := json.Unmarshal(res.Body, &o); res.Status != http.StatusCreated || err != nil || o.CustomerID != "kim" {
		t.Fatalf("order with kim's token: status %d, %v: %s; want 201 for kim", res.Status, err, res.Body)
	}
	if res := in.call(t, http.MethodGet, "/v1/orders/"+o.ID, nil, bearer("lee")); res.Status != http.StatusNotFound {
		t.Errorf("kim's order read by lee: status %d, want 404: %s", res.Status, res.Body)
	}
	if res := in.call(t, http.MethodGet, "/v1/orders", nil, bearer("kim")); res.Status != http.StatusOK || !strings.Contains(string(res.Body), o.ID) {
		t.Errorf("kim's orders: status %d: %s; want her order listed", res.Status, res.Body)
	}
}

// TestRunBodyModeWarns: body mode serves, and says at start-up, as a warning, that nobody is
// verified.
func TestRunBodyModeWarns(t *testing.T) {
	t.Parallel()
	_, prefix := testenv.Redis(t)
	in := startRun(t, serveEnv(t, prefix, nil))
	rec, ok := in.Logs.find("UNVERIFIED CUSTOMERS: STOCKSVC_CUSTOMER_AUTH=body takes the customer from the request body; anyone may buy and read orders as anyone; use it only for demonstrations and tests")
	if !ok || rec["level"] != "WARN" || rec["customer_auth"] != "body" {
		t.Errorf("body mode's start-up line = %v, want a WARN naming customer_auth body", rec)
	}
}
