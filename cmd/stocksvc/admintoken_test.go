package main

import (
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
		{token: "0123456789abcdef"},
		{token: "5f0c1e2d3b4a69788796a5b4c3d2e1f00f1e2d3c4b5a6978"},
		{token: "a", wantErr: "1 characters is too short"},
		{token: "0123456789abcde", wantErr: "15 characters is too short"},
		{token: "change-me", wantErr: `a placeholder ("change-me")`},
		{token: "Change-Me-Change-Me-Please", wantErr: `a placeholder ("change-me")`},
		{token: "please-changeme-0123456789", wantErr: `a placeholder ("changeme")`},
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
