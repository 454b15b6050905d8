package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// envPrefix starts every environment variable of the worker.
const envPrefix = "FLOWSTATE_"

// errHelp is returned by a parse when --help was asked for: the usage is
// printed and the program exits 0.
var errHelp = flag.ErrHelp

// errVersion is returned by the daemon's parse after --version: the build
// information is written to stdout, and the exit status is 0.
var errVersion = errors.New("version printed")

// usageError is a bad flag, value or variable: one line, exit status 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef returns a usageError.
func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// flagSet is the one flag system of the binary, for the daemon and every
// subcommand: flags of the standard package, each with an optional
// environment variable (FLOWSTATE_<NAME>) that a flag given wins over, one
// parse and one usage printer.
type flagSet struct {
	*flag.FlagSet
	envs map[string]string // flag name -> environment variable
	// secretEnvs are variables read elsewhere (not set on the flag),
	// shown in the usage: flag name -> variable.
	secretEnvs map[string]string
	// origins says, after parse, where each flag that was set got its
	// value: "--name" from the command line, or its variable.
	origins map[string]string
}

func newFlagSet(name string) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// The flag package calls Usage on every parse error and on -help; the
	// usage is printed by the caller, for -help only: an error is one line.
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, envs: map[string]string{}, secretEnvs: map[string]string{}, origins: map[string]string{}}
}

// DurationVar defines a duration flag whose bad value is answered with an
// example, as time.ParseDuration's "missing unit" is not.
func (f *flagSet) DurationVar(p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	f.Var((*durationValue)(p), name, usage)
}

// durationValue is a flag.Value of a time.Duration.
type durationValue time.Duration

func (d *durationValue) String() string { return (*time.Duration)(d).String() }

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a number with a unit, such as 100ms, 5s or 1m")
	}
	*d = durationValue(v)
	return nil
}

// Get makes it a flag.Getter.
func (d *durationValue) Get() any { return time.Duration(*d) }

// origin names where a flag that was set got its value: "--name", or its
// environment variable; "" if it was not set.
func (f *flagSet) origin(name string) string { return f.origins[name] }

// withEnv gives each named flag its environment variable.
func (f *flagSet) withEnv(names ...string) {
	for _, n := range names {
		f.envs[n] = envName(n)
	}
}

// envName maps a flag name to its environment variable: nats-url ->
// FLOWSTATE_NATS_URL.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parse sets the flags from the environment, then from args, so that a flag
// given wins. It returns errHelp after -h or --help, and a usageError for
// anything else wrong, positional arguments included.
func (f *flagSet) parse(args []string, getenv func(string) string) error {
	var err error
	f.VisitAll(func(fl *flag.Flag) {
		env, ok := f.envs[fl.Name]
		if !ok || err != nil {
			return
		}
		if v := getenv(env); v != "" {
			if e := fl.Value.Set(v); e != nil {
				err = usagef("invalid value %q for %s (the variable of --%s): %v", v, env, fl.Name, e)
			}
			f.origins[fl.Name] = env
		}
	})
	if err != nil {
		return err
	}
	if err := f.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return &usageError{err}
	}
	f.Visit(func(fl *flag.Flag) { f.origins[fl.Name] = "--" + fl.Name })
	if f.NArg() > 0 {
		return usagef("unexpected argument %q", f.Arg(0))
	}
	return nil
}

// flagColumn is the width of the flag column of the usage.
const flagColumn = 26

// printFlags writes one entry per flag: its name and argument, its usage and
// default, and its environment variable.
func (f *flagSet) printFlags(w io.Writer) {
	f.VisitAll(func(fl *flag.Flag) {
		name := "--" + fl.Name
		arg, usage := flag.UnquoteUsage(fl)
		if _, ok := fl.Value.(*durationValue); ok && arg == "value" {
			arg = "duration"
		}
		if arg != "" && !isBoolFlag(fl) {
			name += " " + strings.ToUpper(arg)
		}
		def := ""
		if fl.DefValue != "" && fl.DefValue != "false" && fl.DefValue != "0" && fl.DefValue != "0s" && !strings.Contains(usage, "(0: ") {
			def = fmt.Sprintf(" (default %s)", fl.DefValue)
		}
		if len(name) > flagColumn {
			fmt.Fprintf(w, "  %s\n  %-*s %s%s\n", name, flagColumn, "", usage, def)
		} else {
			fmt.Fprintf(w, "  %-*s %s%s\n", flagColumn, name, usage, def)
		}
		if env, ok := f.envs[fl.Name]; ok {
			fmt.Fprintf(w, "  %-*s env %s (a flag given wins)\n", flagColumn, "", env)
		} else if env, ok := f.secretEnvs[fl.Name]; ok {
			fmt.Fprintf(w, "  %-*s env %s\n", flagColumn, "", env)
		}
	})
}

func isBoolFlag(fl *flag.Flag) bool {
	b, ok := fl.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// exitCode is the exit status of a failed parse, after reporting it in one
// line on stderr as "<name>: <reason> (see <name> --help)"; 0 after --help
// or --version.
func exitCode(err error, name string, stderr io.Writer) int {
	if errors.Is(err, errHelp) || errors.Is(err, errVersion) {
		return 0
	}
	fmt.Fprintf(stderr, "%s: %s (see %s --help)\n", name, oneLine(err), name)
	return 2
}

// oneLine keeps an error message to one line.
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}
