// Package identity says who the customer of a request is: the subject of a verified token
// (Verifier), the value of a header a trusted gateway sets (FromHeader), or, in the
// demonstration mode, whatever the request's body says. It knows nothing of HTTP handlers:
// the transport (internal/http) reads the credential off the request, asks this package whose
// it is, and answers the refusals.
//
// Every refusal of a credential is ErrUnauthenticated, and one of its narrower sentinels says
// why, so that the transport can answer 401 in one place and a test can tell an expired token
// from a wrong audience.
package identity

import (
	"errors"
	"fmt"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// Mode is where the customer of a request comes from.
type Mode string

// The modes. ModeToken is the production one; ModeBody trusts the client and is for
// demonstrations and tests only.
const (
	// ModeToken: the subject of an `Authorization: Bearer <JWT>` verified against configured
	// keys (Verifier).
	ModeToken Mode = "token"
	// ModeGateway: a header set by a gateway in front of the service that has authenticated
	// the customer itself and strips the header from what clients send (FromHeader).
	ModeGateway Mode = "gateway"
	// ModeBody: the body's customer_id, unverified — anyone may buy, or read orders, as
	// anyone.
	ModeBody Mode = "body"
)

// ParseMode reads a mode by name. Errors: ErrUnknownMode.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeToken, ModeGateway, ModeBody:
		return m, nil
	}
	return "", fmt.Errorf("%w: %q (want token, gateway or body)", ErrUnknownMode, s)
}

// Verified reports whether the mode names the customer from something other than the body,
// so that a body's customer_id is at most a claim to be checked against it.
func (m Mode) Verified() bool { return m == ModeToken || m == ModeGateway }

var (
	// ErrUnknownMode is a mode name that is none of token, gateway or body.
	ErrUnknownMode = errors.New("identity: unknown mode")

	// ErrUnauthenticated is every refusal of a credential: none was sent, or the one sent does
	// not name a customer. Each error below is also ErrUnauthenticated.
	ErrUnauthenticated = errors.New("identity: unauthenticated")
	// ErrNoCredential: the request carries no credential at all.
	ErrNoCredential = fmt.Errorf("%w: no credential", ErrUnauthenticated)
	// ErrInvalidToken: a credential was sent and is refused. Each error below is also
	// ErrInvalidToken.
	ErrInvalidToken = fmt.Errorf("%w: invalid token", ErrUnauthenticated)
	// ErrMalformed: not a compact JWS with one signature and a key id, or not a JWT.
	ErrMalformed = fmt.Errorf("%w: malformed", ErrInvalidToken)
	// ErrUnknownKey: the token's key id (kid) is not among the configured keys, even after
	// looking at them again.
	ErrUnknownKey = fmt.Errorf("%w: unknown signing key", ErrInvalidToken)
	// ErrBadSignature: the signature does not verify with the key its kid names, or its
	// algorithm is not one that key signs with ("none" included).
	ErrBadSignature = fmt.Errorf("%w: bad signature", ErrInvalidToken)
	// ErrExpired: the token's exp is past (beyond the leeway), or it has none.
	ErrExpired = fmt.Errorf("%w: expired", ErrInvalidToken)
	// ErrNotYetValid: the token's nbf (or iat) is in the future (beyond the leeway).
	ErrNotYetValid = fmt.Errorf("%w: not yet valid", ErrInvalidToken)
	// ErrWrongIssuer: the token's iss is not the configured issuer.
	ErrWrongIssuer = fmt.Errorf("%w: wrong issuer", ErrInvalidToken)
	// ErrWrongAudience: the configured audience is not among the token's aud.
	ErrWrongAudience = fmt.Errorf("%w: wrong audience", ErrInvalidToken)
	// ErrKeysUnavailable: the keys could not be had (a JWKS URL never fetched): the
	// credential was not judged, and the request may be retried. Not ErrUnauthenticated.
	ErrKeysUnavailable = errors.New("identity: keys unavailable")
	// ErrInvalidCustomer: the customer named (a token's sub, a gateway's header) is empty or
	// breaks the rules of a customer id (stock.ValidateCustomerID).
	ErrInvalidCustomer = fmt.Errorf("%w: invalid customer", ErrInvalidToken)
)

// CheckCustomer holds a customer id named by a credential to the rules of a customer id
// (stock.ValidateCustomerID). Errors: ErrInvalidCustomer, wrapping the *stock.ValidationError
// that says which rule.
func CheckCustomer(id string) error {
	if err := stock.ValidateCustomerID(id); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidCustomer, err)
	}
	return nil
}

// FromHeader returns the customer a trusted gateway named in its header (gateway mode): the
// value as sent, held to the rules of a customer id. Errors: ErrNoCredential (empty: the
// gateway named nobody), ErrInvalidCustomer.
func FromHeader(value string) (string, error) {
	if value == "" {
		return "", ErrNoCredential
	}
	if err := CheckCustomer(value); err != nil {
		return "", err
	}
	return value, nil
}
