package stock

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// ValidateCustomerID checks a customer id against the rules an order's customer_id is held to:
// not empty or blank, at most MaxCustomerIDLen characters, plain text. Whoever names a
// customer — the body, a verified token's subject, a trusted gateway's header — is held to the
// same rules, so that an id the service accepts one way it accepts every way. Errors: a
// *ValidationError (ErrInvalid) naming field customer_id.
func ValidateCustomerID(id string) error {
	switch {
	case strings.TrimSpace(id) == "":
		return &ValidationError{Field: "customer_id", Reason: "must not be empty"}
	case utf8.RuneCountInString(id) > MaxCustomerIDLen:
		return &ValidationError{Field: "customer_id", Reason: fmt.Sprintf("must be at most %d characters", MaxCustomerIDLen)}
	}
	return plainText("customer_id", id)
}
