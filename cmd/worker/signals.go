package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// signals is the actor that ends the worker on SIGINT or SIGTERM. SIGHUP and
// SIGPIPE are ignored (each logged once): a closed terminal or a closed
// stderr pipe must not kill the worker without a drain.
type signals struct {
	log *slog.Logger
	ch  chan os.Signal
}

// catchSignals starts catching the signals at once, so that none is lost
// (or kills the worker) during start-up; Run handles them.
func catchSignals(log *slog.Logger) signals {
	s := signals{log: log, ch: make(chan os.Signal, 4)}
	signal.Notify(s.ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	return s
}

// Run returns nil on SIGINT or SIGTERM, or when ctx ends.
func (s signals) Run(ctx context.Context) error {
	logged := map[os.Signal]bool{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case sig := <-s.ch:
			switch sig {
			case syscall.SIGHUP, syscall.SIGPIPE:
				if !logged[sig] {
					logged[sig] = true
					s.log.Warn("signal ignored", slog.String("signal", sig.String()))
				}
			default:
				s.log.Info("shutting down", slog.String("signal", sig.String()), slog.Duration("timeout", shutdownTimeout))
				return nil
			}
		}
	}
}

// Stop is stop, as the first actor of the group to stop.
func (s signals) Stop(context.Context) error {
	s.stop()
	return nil
}

// stop stops catching SIGINT and SIGTERM (a second one then ends the process
// at once); SIGHUP and SIGPIPE stay ignored.
func (s signals) stop() {
	signal.Ignore(syscall.SIGHUP, syscall.SIGPIPE)
	signal.Stop(s.ch)
}
