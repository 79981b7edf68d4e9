package identity

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/lestrrat-go/jwx/v3/jwt"
)

// MaxTokenLen bounds the tokens Verify reads: a customer token is a few hundred bytes, and
// anything much longer is refused before any parsing is spent on it.
const MaxTokenLen = 8 << 10

// Config configures a Verifier. Zero fields take the defaults documented on each.
type Config struct {
	// Issuer is the iss every token must carry. Required.
	Issuer string
	// Audience must be among every token's aud. Required.
	Audience string
	// JWKSFile is a file holding the JWKS (RFC 7517 key set) whose keys sign tokens. It is
	// looked at again at most every FileCheck, and at once when a token names a key it does
	// not hold; when its modification time, size or inode has changed it is read again, so a
	// rotation needs no restart. Replace it by renaming a new file over it, so that it is
	// never read half written. Exactly one of JWKSFile and JWKSURL is required.
	JWKSFile string
	// JWKSURL is an http(s) URL serving the JWKS. It is fetched before NewVerifier returns,
	// again every Refresh, and at once (at most once per FileCheck) when a token names a key
	// the last fetch did not hold.
	JWKSURL string
	// Refresh is how often JWKSURL is fetched again. Default 5m.
	Refresh time.Duration
	// FileCheck is the least time between two looks at the keys' source outside the regular
	// refresh: at the file's metadata, or, for a token naming an unknown key, a fetch of the
	// URL. It bounds what a flood of tokens with made-up key ids can cost. Default 1s.
	FileCheck time.Duration
	// Leeway is the clock skew allowed on exp, nbf and iat. Zero allows none.
	Leeway time.Duration
	// HTTPClient fetches JWKSURL. Default: jwx's fetch client (time-outs, bounded redirects).
	HTTPClient *http.Client
	// OnError receives the failures of a reload or refresh, after which the keys last read
	// stay in use. Nil drops them. It must not block.
	OnError func(error)
	// Now is the clock tokens are judged by. Default time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.Refresh <= 0 {
		c.Refresh = 5 * time.Minute
	}
	if c.FileCheck <= 0 {
		c.FileCheck = time.Second
	}
	if c.OnError == nil {
		c.OnError = func(error) {}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports what is missing or wrong in c. Errors: ErrConfig.
func (c Config) Validate() error {
	var errs []error
	if c.Issuer == "" {
		errs = append(errs, errors.New("an issuer is required"))
	}
	if c.Audience == "" {
		errs = append(errs, errors.New("an audience is required"))
	}
	switch {
	case c.JWKSFile == "" && c.JWKSURL == "":
		errs = append(errs, errors.New("a JWKS file or URL is required"))
	case c.JWKSFile != "" && c.JWKSURL != "":
		errs = append(errs, errors.New("a JWKS file and a JWKS URL are both set; choose one"))
	case c.JWKSURL != "":
		if err := CheckJWKSURL(c.JWKSURL); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Leeway < 0 {
		errs = append(errs, errors.New("the leeway must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// CheckJWKSURL reports why raw cannot be a JWKS URL: it must be an absolute http or https URL
// with a host. Errors: plain errors saying which rule.
func CheckJWKSURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("JWKS URL %q: %w", raw, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("JWKS URL %q: the scheme must be http or https", raw)
	case u.Host == "":
		return fmt.Errorf("JWKS URL %q: no host", raw)
	}
	return nil
}

// ErrConfig is a Config that cannot make a Verifier.
var ErrConfig = errors.New("identity: bad verifier configuration")

// Verifier verifies customer tokens: compact JWS-signed JWTs whose key id names a key of the
// configured JWKS (symmetric keys are refused: a key set is published, a shared secret must
// not be), whose iss and aud are the configured ones, whose exp is present and not past and
// whose nbf is not to come (with the leeway), and whose sub is a valid customer id. It is
// safe for concurrent use; Close stops its background refresh.
type Verifier struct {
	cfg  Config
	keys keySource
}

// NewVerifier reads the keys (the file, or a first fetch of the URL bounded by ctx) and
// returns a Verifier over them. Errors: ErrConfig; a failure to read, fetch or parse the keys.
func NewVerifier(ctx context.Context, cfg Config) (*Verifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	var (
		keys keySource
		err  error
	)
	if cfg.JWKSFile != "" {
		keys, err = newFileKeys(cfg.JWKSFile, cfg.FileCheck, cfg.Now, cfg.OnError)
	} else {
		keys, err = newURLKeys(ctx, cfg)
	}
	if err != nil {
		return nil, err
	}
	return &Verifier{cfg: cfg, keys: keys}, nil
}

// Close stops the background refresh of a JWKS URL and waits for it; a file's Verifier has
// nothing to stop. Verify must not be called after Close.
func (v *Verifier) Close() error { return v.keys.close() }

// Verify returns the customer a token names: its subject, once everything Verifier's doc lists
// holds. Errors (each also ErrInvalidToken and ErrUnauthenticated): ErrMalformed,
// ErrUnknownKey, ErrBadSignature, ErrExpired, ErrNotYetValid, ErrWrongIssuer,
// ErrWrongAudience, ErrInvalidCustomer; ErrNoCredential for an empty token;
// ErrKeysUnavailable when the keys could not be had (not a judgement of the token).
func (v *Verifier) Verify(ctx context.Context, token string) (string, error) {
	switch {
	case token == "":
		return "", ErrNoCredential
	case len(token) > MaxTokenLen:
		return "", fmt.Errorf("%w: longer than %d bytes", ErrMalformed, MaxTokenLen)
	}
	msg, err := jws.Parse([]byte(token), jws.WithCompact())
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if len(msg.Signatures()) != 1 {
		return "", fmt.Errorf("%w: want one signature", ErrMalformed)
	}
	kid, _ := msg.Signatures()[0].ProtectedHeaders().KeyID()
	if kid == "" {
		return "", fmt.Errorf("%w: no key id (kid) in the header", ErrMalformed)
	}
	set, err := v.keys.current(ctx)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrKeysUnavailable, err)
	}
	if _, ok := set.LookupKeyID(kid); !ok {
		// A key the issuer has just started signing with: look again (rate-limited) before
		// turning the customer away.
		if set, err = v.keys.lookAgain(ctx); err != nil {
			return "", fmt.Errorf("%w: %w", ErrKeysUnavailable, err)
		}
		if _, ok := set.LookupKeyID(kid); !ok {
			return "", fmt.Errorf("%w: kid %q", ErrUnknownKey, kid)
		}
	}
	tok, err := jwt.Parse([]byte(token),
		// The algorithm comes from the key (its alg, or what its type signs with), never from
		// the token's header alone, which the sender writes.
		jwt.WithKeySet(set, jws.WithInferAlgorithmFromKey(true)),
		jwt.WithValidate(true),
		jwt.WithIssuer(v.cfg.Issuer),
		jwt.WithAudience(v.cfg.Audience),
		jwt.WithRequiredClaim(jwt.ExpirationKey),
		jwt.WithAcceptableSkew(v.cfg.Leeway),
		jwt.WithClock(jwt.ClockFunc(v.cfg.Now)),
	)
	if err != nil {
		return "", refusal(err)
	}
	sub, _ := tok.Subject()
	if err := CheckCustomer(sub); err != nil {
		return "", fmt.Errorf("token subject: %w", err)
	}
	return sub, nil
}

// refusal turns jwx's reason for refusing a token into this package's sentinel for it.
func refusal(err error) error {
	var sentinel error
	switch {
	case errors.Is(err, jwt.TokenExpiredError()):
		sentinel = ErrExpired
	case errors.Is(err, jwt.MissingRequiredClaimError()):
		sentinel = ErrExpired // exp is the one claim required by presence
	case errors.Is(err, jwt.TokenNotYetValidError()), errors.Is(err, jwt.InvalidIssuedAtError()):
		sentinel = ErrNotYetValid
	case errors.Is(err, jwt.InvalidIssuerError()):
		sentinel = ErrWrongIssuer
	case errors.Is(err, jwt.InvalidAudienceError()):
		sentinel = ErrWrongAudience
	case errors.Is(err, jws.VerifyError()), errors.Is(err, jws.VerificationError()):
		sentinel = ErrBadSignature
	default:
		sentinel = ErrMalformed
	}
	return fmt.Errorf("%w: %w", sentinel, err)
}
