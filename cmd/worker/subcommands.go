package main

import "io"

// subcommand runs one subcommand of the binary and returns its exit status.
type subcommand func(args []string, getenv func(string) string, stdout, stderr io.Writer) int

// subcommands of the binary; with none, it runs the worker.
var subcommands = map[string]subcommand{
	"get":     runGet,
	"watch":   runWatch,
	"send":    runSend,
	"bench":   runBench,
	"version": runVersion,
}
