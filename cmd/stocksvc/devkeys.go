package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/stocksvc/stocksvc/internal/identity/mint"
	"github.com/stocksvc/stocksvc/internal/stock"
)

// stocksvc devkeys and stocksvc token stand in for an identity provider, so that token mode,
// the default, can be tried in minutes: one makes a signing key and the JWKS a replica reads
// (STOCKSVC_JWKS_FILE), the other mints customer tokens with that key.

const (
	// devIssuer and devAudience are the iss and aud that stocksvc token puts in its tokens by
	// default, and what the Compose stack's replicas expect unless told otherwise
	// (STOCKSVC_JWT_ISSUER, STOCKSVC_JWT_AUDIENCE in deploy/docker-compose.yml).
	devIssuer   = "stocksvc-dev"
	devAudience = "stocksvc"
	// devKeyDir is where devkeys writes, and token reads, by default; devKeyFile and
	// devJWKSFile are the files' names in it.
	devKeyDir   = "devkeys"
	devKeyFile  = "signing-key.jwk"
	devJWKSFile = "jwks.json"
)

const notForProduction = `These keys are for trying the service, not for production: there, your identity
provider signs the customers' tokens and publishes its JWKS, and no private key is kept
near the service.
`

const devKeysUsage = `Usage: stocksvc devkeys [-out DIR] [-jwks FILE] [-keep]

Makes a development key set for token mode (STOCKSVC_CUSTOMER_AUTH=token): an ES256
signing key, DIR/signing-key.jwk (mode 0600), and its public key set, DIR/jwks.json
(mode 0644), which replicas read as STOCKSVC_JWKS_FILE. "stocksvc token" then mints
customer tokens with the key. A key already in DIR is not replaced: remove it, or pass
-keep to use it as it is.

` + notForProduction + `
Flags:
`

const tokenUsage = `Usage: stocksvc token -sub CUSTOMER [-key FILE] [-iss ISSUER] [-aud AUDIENCE] [-ttl DURATION]

Prints a customer token for CUSTOMER: a JWT signed (ES256) with a key "stocksvc devkeys"
made. A replica in token mode whose STOCKSVC_JWKS_FILE is that key's JWKS, and whose
STOCKSVC_JWT_ISSUER and STOCKSVC_JWT_AUDIENCE are -iss and -aud, takes it as
Authorization: Bearer <token>, for CUSTOMER's orders.

` + notForProduction + `
Flags:
`

// runDevKeys is stocksvc devkeys: it writes a new signing key and its JWKS (or, with -keep,
// the JWKS of the key already there), and says how to use them.
func runDevKeys(args []string, std stdio) error {
	fset := flag.NewFlagSet("stocksvc devkeys", flag.ContinueOnError)
	fset.SetOutput(std.stderr)
	fset.Usage = func() {
		fmt.Fprint(fset.Output(), devKeysUsage)
		fset.PrintDefaults()
	}
	dir := fset.String("out", devKeyDir, "directory of the signing key, created if missing")
	jwksPath := fset.String("jwks", "", "file of the public key set (default DIR/"+devJWKSFile+"): elsewhere, so that replicas can read it without seeing the private key")
	keep := fset.Bool("keep", false, "keep a signing key already in DIR, and write its key set again, rather than refuse")
	if err := fset.Parse(args); err != nil {
		return helpIsNoError("devkeys", err)
	}
	if fset.NArg() > 0 {
		return fmt.Errorf("devkeys: unexpected arguments %q", fset.Args())
	}
	keyPath := filepath.Join(*dir, devKeyFile)
	if *jwksPath == "" {
		*jwksPath = filepath.Join(*dir, devJWKSFile)
	}
	key, made, err := devKey(keyPath, *keep)
	if err != nil {
		return fmt.Errorf("devkeys: %w", err)
	}
	set, err := mint.KeySet(key)
	if err != nil {
		return fmt.Errorf("devkeys: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(*jwksPath), 0o755); err != nil {
		return fmt.Errorf("devkeys: %w", err)
	}
	if err := mint.WriteFile(*jwksPath, set, 0o644); err != nil {
		return fmt.Errorf("devkeys: write the key set: %w", err)
	}
	kid, _ := key.KeyID()
	what := "made a new signing key"
	if !made {
		what = "kept the signing key"
	}
	_, err = fmt.Fprintf(std.stdout, `stocksvc devkeys: %s (ES256, kid %s)
  signing key (private, mode 0600; keep it to yourself): %s
  key set (public, mode 0644; replicas verify with it):  %s
%s
Serve in token mode with:
  STOCKSVC_CUSTOMER_AUTH=token STOCKSVC_JWKS_FILE=%s STOCKSVC_JWT_ISSUER=%s STOCKSVC_JWT_AUDIENCE=%s
Mint a customer's token with:
  stocksvc token -key %s -sub alice
`, what, kid, keyPath, *jwksPath, notForProduction, *jwksPath, devIssuer, devAudience, keyPath)
	return err
}

// devKey returns the signing key at path: the one there when keep is set, else a new one
// written there (mode 0600), refusing to replace one that exists. made says it is new.
func devKey(path string, keep bool) (key jwk.Key, made bool, err error) {
	raw, err := os.ReadFile(path)
	switch {
	case err == nil && keep:
		if key, err = mint.ParseKey(raw); err != nil {
			return nil, false, fmt.Errorf("%s: %w", path, err)
		}
		return key, false, nil
	case err == nil:
		return nil, false, fmt.Errorf("%s exists: remove it to make a new key (the tokens it signed stop verifying), or pass -keep to keep it", path)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, false, err
	}
	if key, err = mint.NewKey(); err != nil {
		return nil, false, err
	}
	if raw, err = json.Marshal(key); err != nil {
		return nil, false, fmt.Errorf("encode the signing key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, false, err
	}
	if err := mint.WriteFile(path, raw, 0o600); err != nil {
		return nil, false, fmt.Errorf("write the signing key: %w", err)
	}
	return key, true, nil
}

// runToken is stocksvc token: it prints one customer token, and nothing else, so that
// $(stocksvc token ...) is the token.
func runToken(args []string, std stdio) error {
	fset := flag.NewFlagSet("stocksvc token", flag.ContinueOnError)
	fset.SetOutput(std.stderr)
	fset.Usage = func() {
		fmt.Fprint(fset.Output(), tokenUsage)
		fset.PrintDefaults()
	}
	keyPath := fset.String("key", filepath.Join(devKeyDir, devKeyFile), "the signing key, as stocksvc devkeys wrote it")
	sub := fset.String("sub", "", "the customer the token names (its sub): 1..64 characters, no control characters (required)")
	iss := fset.String("iss", devIssuer, "the token's issuer (iss): the replicas' STOCKSVC_JWT_ISSUER")
	aud := fset.String("aud", devAudience, "the token's audience (aud): the replicas' STOCKSVC_JWT_AUDIENCE")
	ttl := fset.Duration("ttl", time.Hour, "how long the token is valid from now")
	if err := fset.Parse(args); err != nil {
		return helpIsNoError("token", err)
	}
	var errs []error
	if fset.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fset.Args()))
	}
	if *sub == "" {
		errs = append(errs, errors.New("-sub is required: the customer the token names"))
	} else if err := stock.ValidateCustomerID(*sub); err != nil {
		// A token the replicas would refuse (401) is no use; say why now.
		var invalid *stock.ValidationError
		if errors.As(err, &invalid) {
			err = errors.New(invalid.Reason)
		}
		errs = append(errs, fmt.Errorf("-sub %q: not a customer id: %w", *sub, err))
	}
	if *iss == "" || *aud == "" {
		errs = append(errs, errors.New("-iss and -aud must not be empty"))
	}
	if *ttl <= 0 {
		errs = append(errs, fmt.Errorf("-ttl %v: must be positive", *ttl))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("token: %w", err)
	}
	raw, err := os.ReadFile(*keyPath)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("token: no signing key at %s: make one with stocksvc devkeys (or name it with -key)", *keyPath)
	}
	if err != nil {
		return fmt.Errorf("token: %w", err)
	}
	key, err := mint.ParseKey(raw)
	if err != nil {
		return fmt.Errorf("token: %s: %w", *keyPath, err)
	}
	now := time.Now()
	token, err := mint.Sign(key, mint.Claims{Issuer: *iss, Audience: *aud, Subject: *sub,
		IssuedAt: now, NotBefore: now, Expires: now.Add(*ttl)})
	if err != nil {
		return fmt.Errorf("token: %w", err)
	}
	_, err = fmt.Fprintln(std.stdout, token)
	return err
}

// helpIsNoError turns -h into success (the flag package has printed the usage) and any other
// parse error, which it has printed with the usage too, into command's failure.
func helpIsNoError(command string, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return fmt.Errorf("%s: %w", command, err)
}
