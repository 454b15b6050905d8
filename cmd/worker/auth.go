package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
)

// Auth is how the worker and the subcommands authenticate with an external
// NATS server. Secrets come only from the environment, so that they stay out
// of process listings.
type Auth struct {
	Creds    string // credentials file
	NKeySeed string // nkey seed file
	User     string // password from FLOWSTATE_NATS_PASSWORD
	Password string
	Token    string // from FLOWSTATE_NATS_TOKEN
	TLSCA    string
	TLSCert  string
	TLSKey   string

	tokenFlag bool // --nats-token was given
}

// Environment variables of the secrets.
const (
	envPassword = envPrefix + "NATS_PASSWORD"
	envToken    = envPrefix + "NATS_TOKEN"
)

// register defines the authentication flags on f, each with its variable.
func (a *Auth) register(f *flagSet) {
	for _, d := range []struct {
		p           *string
		name, usage string
	}{
		{&a.Creds, "nats-creds", "NATS credentials `file`"},
		{&a.NKeySeed, "nats-nkey", "NATS nkey seed `file`"},
		{&a.User, "nats-user", "NATS `user`; the password is read from " + envPassword},
		{&a.TLSCA, "tls-ca", "CA certificate `file` to verify the NATS server"},
		{&a.TLSCert, "tls-cert", "client certificate `file` for NATS TLS"},
		{&a.TLSKey, "tls-key", "client key `file` for NATS TLS"},
	} {
		f.StringVar(d.p, d.name, "", d.usage)
		f.withEnv(d.name)
	}
	f.BoolFunc("nats-token", "authenticate with the token in "+envToken+" (read from there only)", func(v string) error {
		if v != "true" {
			return fmt.Errorf("the token is read from %s only, to keep it out of process listings", envToken)
		}
		a.tokenFlag = true
		return nil
	})
	f.secretEnvs["nats-token"] = envToken
}

// resolve reads the secrets from the environment and checks that the
// settings go together. Its errors are usage errors.
func (a *Auth) resolve(getenv func(string) string) error {
	a.Password = getenv(envPassword)
	a.Token = getenv(envToken)
	switch {
	case a.tokenFlag && a.Token == "":
		return usagef("--nats-token needs the token in %s", envToken)
	case a.Password != "" && a.User == "":
		return usagef("%s is set but --nats-user is not", envPassword)
	case a.User != "" && a.Password == "":
		return usagef("--nats-user needs the password in %s", envPassword)
	case (a.TLSCert == "") != (a.TLSKey == ""):
		return usagef("--tls-cert and --tls-key go together")
	case a.Creds != "" && a.NKeySeed != "":
		return usagef("--nats-creds and --nats-nkey are exclusive")
	}
	for _, f := range []struct{ flag, path string }{
		{"--nats-creds", a.Creds}, {"--nats-nkey", a.NKeySeed},
		{"--tls-ca", a.TLSCA}, {"--tls-cert", a.TLSCert}, {"--tls-key", a.TLSKey},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return usagef("%s: %v", f.flag, err)
		}
	}
	return nil
}

// flags names the authentication flags and variables that are set, for the
// embedded server's refusal.
func (a *Auth) flags() []string {
	var set []string
	for _, f := range []struct {
		name string
		on   bool
	}{
		{"--nats-creds", a.Creds != ""}, {"--nats-nkey", a.NKeySeed != ""},
		{"--nats-user", a.User != ""}, {envPassword, a.Password != ""},
		{"--nats-token/" + envToken, a.Token != "" || a.tokenFlag},
		{"--tls-ca", a.TLSCA != ""}, {"--tls-cert", a.TLSCert != ""}, {"--tls-key", a.TLSKey != ""},
	} {
		if f.on {
			set = append(set, f.name)
		}
	}
	return set
}

// options loads and checks the credential and TLS files, once, before any
// connection, and returns the NATS options for them. A file that does not
// parse is an error (exit status 1), not a connection retried for ever.
func (a *Auth) options() ([]nats.Option, error) {
	var opts []nats.Option
	if a.Creds != "" {
		if err := checkCreds(a.Creds); err != nil {
			return nil, fmt.Errorf("--nats-creds %s: %w", a.Creds, err)
		}
		// Read again at each connect, so that a rotated file is used.
		opts = append(opts, nats.UserCredentials(a.Creds))
	}
	if a.NKeySeed != "" {
		o, err := nats.NkeyOptionFromSeed(a.NKeySeed)
		if err != nil {
			return nil, fmt.Errorf("--nats-nkey %s: %w", a.NKeySeed, err)
		}
		opts = append(opts, o)
	}
	if a.User != "" {
		opts = append(opts, nats.UserInfo(a.User, a.Password))
	}
	if a.Token != "" {
		opts = append(opts, nats.Token(a.Token))
	}
	if a.TLSCA != "" {
		opts = append(opts, nats.RootCAs(a.TLSCA))
	}
	if a.TLSCert != "" {
		if _, err := tls.LoadX509KeyPair(a.TLSCert, a.TLSKey); err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		opts = append(opts, nats.ClientCert(a.TLSCert, a.TLSKey))
	}
	return opts, nil
}

// checkCreds parses a credentials file as the NATS client will: a user JWT
// and the user's nkey seed that signs for it.
func checkCreds(path string) error {
	contents, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	token, err := jwt.ParseDecoratedJWT(contents)
	if err != nil {
		return fmt.Errorf("no user JWT: %w", err)
	}
	claims, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return fmt.Errorf("no valid user JWT: %w", err)
	}
	kp, err := jwt.ParseDecoratedUserNKey(contents)
	if err != nil {
		return fmt.Errorf("no valid user nkey seed: %w", err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return err
	}
	if pub != claims.Subject {
		return errors.New("the nkey seed is not the JWT's user")
	}
	return nil
}

// checkNATSURL checks each comma-separated entry of a --nats-url: a URL of
// scheme nats, tls, ws or wss with a host. An entry without a scheme is
// refused rather than read as nats://, so that a typo such as "nats:/host"
// is not taken for a host name. It returns the entries that carry
// credentials, redacted, to be warned about.
func checkNATSURL(s string) (withSecrets []string, err error) {
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			return nil, usagef("--nats-url %q: empty entry", s)
		}
		if !strings.Contains(e, "://") {
			if at := strings.LastIndex(e, "@"); at >= 0 {
				e = "xxxxx" + e[at:] // credentials, maybe
			}
			return nil, usagef("--nats-url entry %q has no scheme: write nats://%s (or tls://, ws://, wss://)", e, e)
		}
		u, err := url.Parse(e)
		if err != nil {
			return nil, usagef("--nats-url entry %q does not parse", redactURL(e))
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return nil, usagef("--nats-url entry %q: scheme %q, want nats, tls, ws or wss", u.Redacted(), u.Scheme)
		}
		if u.Hostname() == "" {
			return nil, usagef("--nats-url entry %q has no host", u.Redacted())
		}
		if u.User != nil {
			withSecrets = append(withSecrets, u.Redacted())
		}
	}
	return withSecrets, nil
}

// redactURLs redacts each entry of a comma-separated list of URLs.
func redactURLs(s string) string {
	entries := strings.Split(s, ",")
	for i, e := range entries {
		if u, err := url.Parse(strings.TrimSpace(e)); err == nil {
			entries[i] = u.Redacted()
		} else {
			entries[i] = redactURL(e)
		}
	}
	return strings.Join(entries, ",")
}

// redactURL hides what follows "//" up to the last "@" of a URL that does
// not parse, in case it holds a password.
func redactURL(s string) string {
	at := strings.LastIndex(s, "@")
	start := strings.Index(s, "//")
	if at < 0 || start < 0 || start > at {
		return s
	}
	return s[:start+2] + "xxxxx" + s[at:]
}
