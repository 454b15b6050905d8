package main

import (
	"fmt"
	"io"
	"strings"
)

// printUsage writes the worker's help.
func printUsage(w io.Writer, f *flagSet) {
	fmt.Fprint(w, `worker keeps the live state of stream-processing flows: it applies the
heartbeat reports of flownodes from NATS and serves the aggregate to frontends.

Usage:
  worker [flags]
  worker get|watch|send|bench [flags]
  worker version

With no --nats-url it starts an embedded NATS server on --listen and serves on it.
Every flag can also be set with its environment variable (a flag given wins).

Subcommands talk to a running worker over NATS (--nats-url, default
nats://127.0.0.1:4222, and --prefix); see worker <subcommand> --help:
  get     print the current flow state as a table, or its JSON with --json
  watch   print one line per state update
  send    send one heartbeat report and print the revision it was applied at
  bench   simulate flownodes sending reports, report the rate and latency,
          and check the final state
  version print the version, the commit it was built from and the Go
          version (also: worker --version)

Flags:
`)
	f.printFlags(w)
	fmt.Fprint(w, `
Signals: SIGINT or SIGTERM stops taking reports, acknowledges the reports
already applied, publishes the last state and exits 0 within 5 s. SIGHUP and
SIGPIPE are ignored.
`)
}

// printCommandUsage writes a subcommand's help.
func printCommandUsage(w io.Writer, c *cliCommand) {
	synopsis := strings.TrimSpace("worker " + c.name + " " + c.synopsis + " [flags]")
	fmt.Fprintf(w, "Usage:\n  %s\n\n%s\n\nFlags:\n", strings.ReplaceAll(synopsis, "  ", " "), strings.TrimSpace(c.about))
	c.flags.printFlags(w)
	fmt.Fprintf(w, "\nExample:\n%s\n", indent(strings.TrimSpace(c.example), "  "))
}

// indent prefixes every line of s.
func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}
