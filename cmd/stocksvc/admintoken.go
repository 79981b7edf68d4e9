package main

import (
	"fmt"
	"strings"
)

// minAdminToken is the shortest admin token the service starts with: 16 characters, 96 bits
// or more of a random hex or base64 string, beyond guessing at any request rate a balancer
// lets through. `openssl rand -hex 24` makes a good one.
const minAdminToken = 16

// checkAdminToken refuses an admin token that protects nothing: one shorter than
// minAdminToken, or one a README or a tutorial would show (`change-me`), which whoever read
// the same page can send too. Empty is allowed: it turns the admin routes off.
func checkAdminToken(token string) error {
	if token == "" {
		return nil
	}
	const how = "make one with: openssl rand -hex 24"
	lower := strings.ToLower(token)
	for _, placeholder := range []string{"change-me", "changeme", "change_me", "changeit"} {
		if strings.Contains(lower, placeholder) {
			return fmt.Errorf("STOCKSVC_ADMIN_TOKEN: a placeholder (%q) is not a secret; %s", placeholder, how)
		}
	}
	if n := len(token); n < minAdminToken {
		return fmt.Errorf("STOCKSVC_ADMIN_TOKEN: %d characters is too short to keep the admin routes safe (at least %d); %s", n, minAdminToken, how)
	}
	return nil
}
