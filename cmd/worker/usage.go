package main

import (
	"flag"
	"fmt"
	"io"
)

func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `worker keeps the live state of stream-processing flows: it applies the
heartbeat reports of flownodes from NATS and serves the aggregate to frontends.

Usage:
  worker [flags]
  worker get|watch|send|bench [flags]

With no --nats-url it starts an embedded NATS server on --listen and serves on it.
Every flag can also be set with its environment variable (a flag given wins).

Subcommands talk to a running worker over NATS (--nats-url, default
nats://127.0.0.1:4222, and --prefix); see worker <subcommand> --help:
  get     print the current flow state as a table, or its JSON with --json
  watch   print one line per state update
  send    send one heartbeat report and print the revision it was applied at
  bench   simulate flownodes sending reports, report the rate and latency,
          and check the final state

Flags:
`)
	fs.VisitAll(func(f *flag.Flag) {
		def := ""
		if f.DefValue != "" && f.DefValue != "false" {
			def = fmt.Sprintf(" (default %s)", f.DefValue)
		}
		env := envName(f.Name)
		if f.Name == "nats-token" {
			env = envPrefix + "NATS_TOKEN"
		}
		fmt.Fprintf(w, "  --%-18s %s%s\n  %-20s env %s\n", f.Name, f.Usage, def, "", env)
	})
	fmt.Fprint(w, `
Signals: SIGINT or SIGTERM drains the subscription, applies and acknowledges
the reports already received, publishes the last state and exits 0.
`)
}
