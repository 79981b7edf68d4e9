package main

import (
	"crypto/rand"
	"encoding/hex"
	"os/exec"
	"strings"
	"testing"
)

func TestCheckAdminToken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		token   string
		wantErr string // "" for none
	}{
		{token: ""}, // the admin routes off
		{token: "5f0c1e2d3b4a69788796a5b4c3d2e1f00f1e2d3c4b5a6978"},
		{token: "TCYVI43XKUOYK5IQ7LMRPYUBLB"}, // crypto/rand.Text, as the load harness makes them
		{token: "admin-secret-8faab3cccff97e5a"},
		// Issue #31: each of these started the service.
		{token: "aaaaaaaaaaaaaaaa", wantErr: "about 8 bits of entropy"},
		{token: "1234567890123456", wantErr: "about 14 bits of entropy"},
		{token: "password12345678", wantErr: "about 14 bits of entropy"},
		// Long is not enough: a repeat, a keyboard walk, a sequence, words.
		{token: strings.Repeat("ab", 32), wantErr: "bits of entropy"},
		{token: "qwertyuiopasdfghjklzxcvbnm", wantErr: "bits of entropy"},
		{token: "0123456789abcdef0123456789abcdef", wantErr: "bits of entropy"},
		{token: "admin-admin-admin-admin-admin", wantErr: "bits of entropy"},
		{token: "a", wantErr: "bits of entropy"},
		// Random, but too short: 16 hex digits are 64 bits of randomness and some 53 by the
		// estimate, which cannot know the string was drawn at random.
		{token: "8faab3cccff97e5a", wantErr: "bits of entropy"},
		{token: "change-me", wantErr: `a placeholder ("change-me")`},
		{token: "Change-Me-Change-Me-Please", wantErr: `a placeholder ("change-me")`},
		{token: "please-changeme-" + strings.Repeat("5f0c1e2d3b4a6978", 3), wantErr: `a placeholder ("changeme")`},
	}
	for _, tt := range tests {
		err := checkAdminToken(tt.token)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("checkAdminToken(%q) = %v, want nil", tt.token, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "openssl rand -hex 24")):
			t.Errorf("checkAdminToken(%q) = %v, want an error with %q and how to make a token", tt.token, err, tt.wantErr)
		}
	}
}

// TestCheckAdminTokenGenerated: the tokens the docs, the Compose file, .ci/run and the load
// harness make are accepted, every one of many: `openssl rand -hex 24` (and CI's 24 random
// bytes as hex, the same thing), and crypto/rand.Text.
func TestCheckAdminTokenGenerated(t *testing.T) {
	t.Parallel()
	for range 50 {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		for _, token := range []string{hex.EncodeToString(b), rand.Text()} {
			if err := checkAdminToken(token); err != nil {
				t.Fatalf("checkAdminToken(%q) = %v, want a generated token accepted", token, err)
			}
		}
	}
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Logf("no openssl on the PATH: its tokens are the hex of 24 random bytes, checked above")
		return
	}
	for range 10 {
		out, err := exec.Command(openssl, "rand", "-hex", "24").Output()
		if err != nil {
			t.Fatalf("openssl rand -hex 24: %v", err)
		}
		if token := strings.TrimSpace(string(out)); len(token) != 48 || checkAdminToken(token) != nil {
			t.Fatalf("openssl rand -hex 24 made %q: checkAdminToken = %v, want it accepted", token, checkAdminToken(token))
		}
	}
}
