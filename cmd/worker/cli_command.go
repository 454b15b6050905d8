package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"flowstate/client"
	"flowstate/protocol"
)

// defaultCLIURL is where the subcommands find NATS by default.
const defaultCLIURL = "nats://127.0.0.1:4222"

// cliCommand is the part every subcommand shares: its help text, its flags
// (--nats-url, --prefix, --timeout and its own) and the connection.
type cliCommand struct {
	name     string // "get"
	synopsis string // "[--json]"
	about    string // what it does, a few lines
	example  string // one or more example lines

	fs      *flag.FlagSet
	auth    Config // only its credential and TLS fields are used
	natsURL string
	prefix  string
	timeout time.Duration
	envs    map[string]string // flag name -> environment variable
}

// newCLICommand returns a command with the shared flags defined; the caller
// adds its own before parse.
func newCLICommand(name, synopsis, about, example string) *cliCommand {
	c := &cliCommand{name: name, synopsis: synopsis, about: about, example: example,
		fs: flag.NewFlagSet("worker "+name, flag.ContinueOnError)}
	c.fs.SetOutput(io.Discard)
	c.fs.StringVar(&c.natsURL, "nats-url", defaultCLIURL, "NATS server or cluster to connect to (comma-separated `URL`s)")
	c.fs.StringVar(&c.prefix, "prefix", protocol.DefaultPrefix, "subject `prefix` the worker serves")
	c.fs.DurationVar(&c.timeout, "timeout", client.DefaultTimeout, "bound on connecting and on each request")
	c.envs = map[string]string{"nats-url": envName("nats-url"), "prefix": envName("prefix")}
	for _, f := range []struct {
		p           *string
		name, usage string
	}{
		{&c.auth.Creds, "nats-creds", "NATS credentials `file`"},
		{&c.auth.NKeySeed, "nats-nkey", "NATS nkey seed `file`"},
		{&c.auth.User, "nats-user", "NATS `user`; the password is read from " + envPrefix + "NATS_PASSWORD"},
		{&c.auth.TLSCA, "tls-ca", "CA certificate `file` to verify the NATS server"},
		{&c.auth.TLSCert, "tls-cert", "client certificate `file` for NATS TLS"},
		{&c.auth.TLSKey, "tls-key", "client key `file` for NATS TLS"},
	} {
		c.fs.StringVar(f.p, f.name, "", f.usage)
		c.envs[f.name] = envName(f.name)
	}
	return c
}

// parse reads the environment, then args. When it returns ok false, the
// command is over with exit status code: 0 after --help, 2 after a bad
// flag (reported on stderr in one line).
func (c *cliCommand) parse(args []string, getenv func(string) string, stdout, stderr io.Writer) (code int, ok bool) {
	for name, env := range c.envs {
		if v := getenv(env); v != "" {
			if err := c.fs.Set(name, v); err != nil {
				return c.fail(stderr, fmt.Errorf("invalid value %q for %s: %v", v, env, err)), false
			}
		}
	}
	if err := c.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.usage(stdout)
			return 0, false
		}
		return c.fail(stderr, err), false
	}
	if c.fs.NArg() > 0 {
		return c.fail(stderr, fmt.Errorf("unexpected argument %q", c.fs.Arg(0))), false
	}
	if c.prefix == "" {
		return c.fail(stderr, errors.New("--prefix must not be empty")), false
	}
	if err := (client.Options{Prefix: c.prefix, Timeout: c.timeout}).Validate(); err != nil {
		return c.fail(stderr, errors.New(strings.TrimPrefix(err.Error(), "client: "))), false
	}
	if c.timeout <= 0 {
		return c.fail(stderr, fmt.Errorf("--timeout %v must be positive", c.timeout)), false
	}
	// Secrets only from the environment, as for the worker.
	c.auth.Password = getenv(envPrefix + "NATS_PASSWORD")
	c.auth.Token = getenv(envPrefix + "NATS_TOKEN")
	if c.auth.User != "" && c.auth.Password == "" {
		return c.fail(stderr, fmt.Errorf("--nats-user needs the password in %sNATS_PASSWORD", envPrefix)), false
	}
	if (c.auth.TLSCert == "") != (c.auth.TLSKey == "") {
		return c.fail(stderr, errors.New("--tls-cert and --tls-key go together")), false
	}
	return 0, true
}

// fail reports a usage error in one line and returns exit status 2.
func (c *cliCommand) fail(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "worker %s: %s (see worker %s --help)\n", c.name, oneLine(err), c.name)
	return 2
}

// errorf reports a failure in one line and returns exit status 1.
func (c *cliCommand) errorf(stderr io.Writer, format string, args ...any) int {
	fmt.Fprintf(stderr, "worker %s: %s\n", c.name, strings.ReplaceAll(fmt.Sprintf(format, args...), "\n", "; "))
	return 1
}

// connect dials NATS and returns a client of the worker. The connection
// reconnects as the library does by default; close it when done.
func (c *cliCommand) connect(stderr io.Writer) (*nats.Conn, *client.Client, int) {
	opts, err := authOptions(c.auth)
	if err != nil {
		return nil, nil, c.errorf(stderr, "%v", err)
	}
	opts = append(opts, nats.Name("flowstate-"+c.name), nats.Timeout(c.timeout))
	nc, err := nats.Connect(c.natsURL, opts...)
	if err != nil {
		return nil, nil, c.errorf(stderr, "connect to %s: %v", c.natsURL, err)
	}
	cl, err := client.New(nc, client.Options{Prefix: c.prefix, Timeout: c.timeout})
	if err != nil {
		nc.Close()
		return nil, nil, c.errorf(stderr, "%v", err)
	}
	return nc, cl, 0
}

// usage prints the command's help.
func (c *cliCommand) usage(w io.Writer) {
	synopsis := strings.TrimSpace("worker " + c.name + " " + c.synopsis + " [flags]")
	fmt.Fprintf(w, "Usage:\n  %s\n\n%s\n\nFlags:\n", strings.ReplaceAll(synopsis, "  ", " "), strings.TrimSpace(c.about))
	c.fs.VisitAll(func(f *flag.Flag) {
		name := "--" + f.Name
		arg, usage := flag.UnquoteUsage(f)
		if arg != "" {
			name += " " + strings.ToUpper(arg)
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "false" && !strings.Contains(usage, "(0: ") {
			def = fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "  %-24s %s%s\n", name, usage, def)
		if env, ok := c.envs[f.Name]; ok {
			fmt.Fprintf(w, "  %-24s env %s (a flag given wins)\n", "", env)
		}
	})
	fmt.Fprintf(w, "\nExample:\n%s\n", indent(strings.TrimSpace(c.example), "  "))
}

// indent prefixes every line of s.
func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}
