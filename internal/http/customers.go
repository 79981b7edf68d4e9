package stockhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/stocksvc/stocksvc/internal/identity"
)

// CustomerAuth says who the customer of a customer route (POST /v1/orders, GET /v1/orders,
// GET /v1/orders/{id}) is. The zero value is body mode.
type CustomerAuth struct {
	// Mode is where the customer comes from: identity.ModeToken (Verifier), ModeGateway
	// (Header) or ModeBody. Empty means ModeBody: the service trusts whoever calls it, as
	// tests and demonstrations want; cmd/stocksvc chooses the mode and defaults to token.
	Mode identity.Mode
	// Verifier verifies the bearer token in token mode. Required in that mode.
	Verifier Verifier
	// Header names the header a trusted gateway sets in gateway mode. Default X-Customer-Id.
	Header string
}

// Verifier is what token mode asks of the identity layer: *identity.Verifier, or a fake.
type Verifier interface {
	// Verify returns the customer token names. Errors: identity.ErrUnauthenticated (and a
	// narrower identity sentinel saying why), identity.ErrKeysUnavailable.
	Verify(ctx context.Context, token string) (string, error)
	// Remembered returns what Verify concluded of token before, checking nothing. Errors:
	// identity.ErrNotRemembered when it has no judgement of token; Verify's.
	Remembered(ctx context.Context, token string) (string, error)
}

var _ Verifier = (*identity.Verifier)(nil)

// withDefaults fills the defaults in, and panics on a configuration no server can run with:
// a mistake of the code that builds the server, which cmd's validation rules out first.
func (a CustomerAuth) withDefaults() CustomerAuth {
	if a.Mode == "" {
		a.Mode = identity.ModeBody
	}
	if a.Header == "" {
		a.Header = "X-Customer-Id"
	}
	if _, err := identity.ParseMode(string(a.Mode)); err != nil {
		panic(fmt.Sprintf("stockhttp: %v", err))
	}
	if a.Mode == identity.ModeToken && a.Verifier == nil {
		panic("stockhttp: token mode needs a Verifier")
	}
	return a
}

// caller is who a customer route serves: an admin (any customer's orders), a customer a token
// or gateway named, or, in body mode, nobody in particular (customer empty: the request says).
type caller struct {
	admin    bool
	customer string
}

type callerKey struct{}

func callerOf(ctx context.Context) caller {
	c, _ := ctx.Value(callerKey{}).(caller)
	return c
}

// authError is a customer credential refused, with what to tell the client; problemFor
// answers it 401 unauthenticated.
type authError struct {
	detail string
	err    error // an identity sentinel (ErrNoCredential, or ErrInvalidToken and why)
}

func (e *authError) Error() string { return e.detail + ": " + e.err.Error() }
func (e *authError) Unwrap() error { return e.err }

// withCustomer names the caller of a customer route (docs/api.md, "Customer identity"), and
// holds a verified customer to its rate limit (limits.go) — but for an order the line bounds
// (admittedOrder.bounded). With adminReads, the admin bearer
// token is recognised too (read routes on the listener that serves the admin routes): an
// admin reads any order and any customer's list. Otherwise, by mode: a verified token's
// subject, the gateway's header, or, in body mode, no one (the handler takes the body's
// customer_id, as before identities existed).
func (s *Server) withCustomer(adminReads bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, err := s.caller(r, adminReads)
			if err == nil && c.customer != "" && !admittedOf(r.Context()).bounded() {
				err = s.limits.takeCustomer(c.customer)
			}
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
		})
	}
}

// caller names the caller of r. An order whose passes were checked is their customer's
// (token mode: no token is looked at); a token verified before is a customer at the cost of a
// lookup; anything else is checked — an admin token where adminReads lets one in, then the
// customer's credential — unless its client address has spent a budget of failures. Errors:
// an *authError (401), a *limitedError (429), identity.ErrKeysUnavailable.
func (s *Server) caller(r *http.Request, adminReads bool) (caller, error) {
	if a := admittedOf(r.Context()); a != nil && a.cleared.Customer != "" && s.customers.Mode == identity.ModeToken {
		// The order's passes name the customer: they were issued to a ticket that was issued
		// to a verified customer, and were checked already (withAdmission).
		return caller{customer: a.cleared.Customer}, nil
	}
	token, hasBearer := bearer(r.Header.Get("Authorization"))
	remembered := identity.ErrNotRemembered
	if s.customers.Mode == identity.ModeToken && hasBearer {
		var customer string
		if customer, remembered = s.customers.Verifier.Remembered(r.Context(), token); remembered == nil {
			return caller{customer: customer}, nil
		}
	}
	// The bearer token was compared with the admin token and is not it: a wrong guess at the
	// admin token only if it is no customer's credential either.
	guessed := false
	if adminReads && hasBearer {
		admin, err := s.checkAdmin(r, token)
		if err != nil || admin {
			return caller{admin: admin}, err
		}
		guessed = true
	}
	var c caller
	var err error
	switch s.customers.Mode {
	case identity.ModeToken:
		c.customer, err = s.checked(r, func() (string, error) {
			switch {
			case !hasBearer:
				return "", &authError{detail: "a customer token is required: Authorization: Bearer <token>", err: identity.ErrNoCredential}
			case errors.Is(remembered, identity.ErrNotRemembered):
				return s.customers.Verifier.Verify(r.Context(), token)
			}
			return "", remembered
		})
		if errors.Is(err, identity.ErrUnauthenticated) {
			if _, ok := errors.AsType[*authError](err); !ok {
				err = &authError{detail: "the bearer token is refused: " + tokenRefusal(err), err: err}
			}
		}
	case identity.ModeGateway:
		c.customer, err = s.checked(r, func() (string, error) {
			customer, err := identity.FromHeader(r.Header.Get(s.customers.Header))
			if err != nil {
				return "", &authError{detail: "the gateway named no valid customer in " + s.customers.Header, err: err}
			}
			return customer, nil
		})
	}
	if guessed && s.limits.admin != nil && errors.Is(err, identity.ErrUnauthenticated) {
		s.limits.adminFailed(r.Context(), s.limits.clientAddress(r))
	}
	return c, err
}

// checked runs check, the check of a credential not known good, unless the client address
// has spent its budget of refused credentials, and counts a refusal against it. Errors:
// check's, a *limitedError.
func (s *Server) checked(r *http.Request, check func() (string, error)) (string, error) {
	if s.limits.address == nil {
		return check()
	}
	addr := s.limits.clientAddress(r)
	if err := s.limits.addressBlocked(addr); err != nil {
		return "", err
	}
	customer, err := check()
	if errors.Is(err, identity.ErrUnauthenticated) {
		s.limits.address.Take(addr)
	}
	return customer, err
}

// bearer reads an Authorization header's bearer token (RFC 6750: the scheme in any case).
func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	return token, ok && strings.EqualFold(scheme, "Bearer") && token != ""
}

// tokenRefusals say why a token was refused, most specific first.
var tokenRefusals = []struct {
	err  error
	text string
}{
	{identity.ErrExpired, "expired (or no exp)"},
	{identity.ErrNotYetValid, "not valid yet (nbf or iat in the future)"},
	{identity.ErrWrongIssuer, "wrong issuer"},
	{identity.ErrWrongAudience, "wrong audience"},
	{identity.ErrUnknownKey, "signed by an unknown key (kid)"},
	{identity.ErrBadSignature, "bad signature or algorithm"},
	{identity.ErrInvalidCustomer, "its subject is not a valid customer id"},
	{identity.ErrMalformed, "not a signed JWT with a kid"},
}

// tokenRefusal is the reason a client is told: the sentinel's words, never the library's
// chain (which quotes claims and keys).
func tokenRefusal(err error) string {
	for _, r := range tokenRefusals {
		if errors.Is(err, r.err) {
			return r.text
		}
	}
	return "invalid"
}

// orderCustomer is the customer an order is placed for: the verified caller, which a body's
// customer_id may repeat but not contradict; in body mode, the body's. Errors: a
// customer-mismatch requestError.
func orderCustomer(ctx context.Context, body string) (string, error) {
	c := callerOf(ctx)
	switch {
	case c.customer == "":
		return body, nil
	case body != "" && body != c.customer:
		return "", mismatch("customer_id")
	}
	return c.customer, nil
}

func mismatch(field string) error {
	return &requestError{code: "customer-mismatch", field: field,
		detail: field + " names another customer than the verified one; leave it out or send the verified customer's"}
}

// mayRead reports whether the caller may read an order of customer: an admin and, in body
// mode, anyone may; a verified customer only their own (the others are answered as orders
// that do not exist, so that order ids reveal nothing).
func mayRead(ctx context.Context, customer string) bool {
	c := callerOf(ctx)
	return c.admin || c.customer == "" || c.customer == customer
}
