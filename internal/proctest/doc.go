// Package proctest runs the programs that end-to-end tests, the robustness
// test and the load test drive as processes: nats-server, alone or as a
// JetStream cluster (optionally with every route through a
// netfault.Proxy), and the worker.
//
// A Process is one program that may be started, stopped, paused and
// started again; its output is captured (an Output keeps it, or its last
// bytes, and wakes whoever waits for a line). Stopping is bounded:
// SIGTERM, then SIGKILL after a timeout. Servers listen on free ports of
// 127.0.0.1 only.
//
// A proxied Cluster sends every route and, through ClientProxy, any
// client link through a netfault.Proxy of its own, so that a test can
// stall, cut or hold one direction of each link. Nothing goes around a
// proxy: the servers advertise no client URLs (--no_advertise), so
// clients know only the proxies they were given, and each server
// advertises a cluster address nothing listens on, so that a server that
// hears of a peer through a third one cannot open a route of its own to
// it behind the proxies.
//
// The package does not import testing: callers register their own
// cleanup (Process.Stop, Cluster.Close) and turn errors into failures.
package proctest
