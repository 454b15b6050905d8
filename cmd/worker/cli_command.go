package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/client"
	"github.com/flowstate-io/flowstate/protocol"
)

// defaultCLIURL is where the subcommands find NATS by default: a worker's
// embedded server at its default address.
const defaultCLIURL = "nats://" + defaultListen

// cliCommand is the part every subcommand shares: its help text, its flags
// (--nats-url, --prefix, --timeout, the authentication flags and its own)
// and the connection. Its flags are the daemon's flag system (flags.go).
type cliCommand struct {
	name     string // "get"
	synopsis string // "[--json]"
	about    string // what it does, a few lines
	example  string // one or more example lines

	flags   *flagSet
	fs      *flag.FlagSet // flags.FlagSet, where a command adds its own flags
	auth    Auth
	natsURL string
	prefix  string
	timeout time.Duration
	// unnumbered makes connect's client send reports exactly as given
	// (client.Options.Unnumbered).
	unnumbered bool
}

// newCLICommand returns a command with the shared flags defined; the caller
// adds its own to fs before parse.
func newCLICommand(name, synopsis, about, example string) *cliCommand {
	c := &cliCommand{name: name, synopsis: synopsis, about: about, example: example,
		flags: newFlagSet("worker " + name)}
	c.fs = c.flags.FlagSet
	c.fs.StringVar(&c.natsURL, "nats-url", defaultCLIURL, "NATS server or cluster to connect to (comma-separated `URL`s)")
	c.fs.StringVar(&c.prefix, "prefix", protocol.DefaultPrefix, "subject `prefix` the worker serves")
	c.flags.DurationVar(&c.timeout, "timeout", client.DefaultTimeout, "bound on connecting and on each request")
	c.flags.withEnv("nats-url", "prefix")
	c.auth.register(c.flags)
	return c
}

// parse reads the environment, then args. When it returns ok false, the
// command is over with exit status code: 0 after --help, 2 after a bad
// flag (reported on stderr in one line).
func (c *cliCommand) parse(args []string, getenv func(string) string, stdout, stderr io.Writer) (code int, ok bool) {
	err := c.flags.parse(args, getenv)
	if errors.Is(err, errHelp) {
		c.usage(stdout)
		return 0, false
	}
	if err == nil {
		err = c.check(getenv)
	}
	if err != nil {
		return c.fail(stderr, err), false
	}
	return 0, true
}

// check validates the shared flags.
func (c *cliCommand) check(getenv func(string) string) error {
	if c.prefix == "" {
		return errors.New("--prefix must not be empty")
	}
	if err := (client.Options{Prefix: c.prefix, Timeout: c.timeout}).Validate(); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "client: "))
	}
	if c.timeout <= 0 {
		return fmt.Errorf("--timeout %v must be positive", c.timeout)
	}
	if _, err := checkNATSURL(c.natsURL); err != nil {
		return err
	}
	return c.auth.resolve(getenv)
}

// fail reports a usage error in one line and returns exit status 2.
func (c *cliCommand) fail(stderr io.Writer, err error) int {
	return exitCode(err, "worker "+c.name, stderr)
}

// errorf reports a failure in one line and returns exit status 1.
func (c *cliCommand) errorf(stderr io.Writer, format string, args ...any) int {
	// The message may carry outside text (a worker's reason, a subject):
	// escaped, so that it neither breaks the line nor drives the terminal.
	fmt.Fprintf(stderr, "worker %s: %s\n", c.name, printable(strings.ReplaceAll(fmt.Sprintf(format, args...), "\n", "; "), 4*maxOutsideText))
	return 1
}

// connect dials NATS and returns a client of the worker. The connection
// reconnects as the library does by default; close it when done.
func (c *cliCommand) connect(stderr io.Writer) (*nats.Conn, *client.Client, int) {
	opts, err := c.auth.options()
	if err != nil {
		return nil, nil, c.errorf(stderr, "%v", err)
	}
	opts = append(opts, nats.Name("flowstate-"+c.name), nats.Timeout(c.timeout))
	nc, err := nats.Connect(c.natsURL, opts...)
	if err != nil {
		return nil, nil, c.errorf(stderr, "connect to %s: %v", redactURLs(c.natsURL), err)
	}
	cl, err := client.New(nc, client.Options{Prefix: c.prefix, Timeout: c.timeout, Unnumbered: c.unnumbered, MaxFlows: cliMaxFlows, MaxGetBytes: cliMaxGetBytes})
	if err != nil {
		nc.Close()
		return nil, nil, c.errorf(stderr, "%v", err)
	}
	return nc, cl, 0
}

// usage prints the command's help.
func (c *cliCommand) usage(w io.Writer) { printCommandUsage(w, c) }

// The subcommands read their operator's worker, whatever the size of its
// state (--max-total-flows 1,000,000 and more), so their client takes no
// bound of its own on the flows and bytes of a get.
const (
	cliMaxFlows    = math.MaxInt
	cliMaxGetBytes = math.MaxInt
)
