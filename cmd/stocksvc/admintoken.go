package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/trustelem/zxcvbn"
)

// minAdminTokenBits is the least strength of an admin token the service starts with, as
// zxcvbn estimates it: the base-2 logarithm of the guesses a cracker needs who tries common
// passwords, words, names, keyboard walks, repeats, sequences and dates before brute force.
// 2^64 guesses outlast any request rate a balancer lets through by centuries, however many
// replicas share the token; `aaaaaaaaaaaaaaaa` is 8 bits, `1234567890123456` and
// `password12345678` 14. zxcvbn counts each character it cannot explain as ten guesses, so a
// random string needs some 20 characters or more, whatever its alphabet: `openssl rand -hex
// 24` (48 hex digits) is estimated at 140 bits or more.
const minAdminTokenBits = 64

// maxEstimatedRunes bounds the part of a token the estimate reads: zxcvbn's matching grows
// faster than the length (a second at 400 characters), and the first 100 characters of a
// good token are already far above minAdminTokenBits.
const maxEstimatedRunes = 100

// checkAdminToken refuses an admin token that protects nothing: one a README or a tutorial
// would show (`change-me`), which whoever read the same page can send too, or one whose
// estimated strength is below minAdminTokenBits. Empty is allowed: it turns the admin routes
// off.
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
	if bits := tokenBits(token); bits < minAdminTokenBits {
		return fmt.Errorf("STOCKSVC_ADMIN_TOKEN: too easy to guess to keep the admin routes safe: about %.0f bits of entropy by zxcvbn's estimate, at least %d needed (a random string of some 20 characters or more); %s",
			bits, minAdminTokenBits, how)
	}
	return nil
}

// tokenBits is zxcvbn's estimate of token's strength in bits, read on its first
// maxEstimatedRunes characters; 0 for text zxcvbn does not read (invalid UTF-8).
func tokenBits(token string) float64 {
	if r := []rune(token); len(r) > maxEstimatedRunes {
		token = string(r[:maxEstimatedRunes])
	}
	guesses := zxcvbn.PasswordStrength(token, nil).Guesses
	if guesses < 1 {
		return 0
	}
	return math.Log2(guesses)
}
