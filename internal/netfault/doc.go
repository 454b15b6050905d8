// Package netfault breaks network links on purpose, for tests: a Proxy
// sits between a client and a server on loopback and can stall the link
// (no byte either way, sockets open), hold one direction only, or cut it
// (connections reset, new ones refused), and heal it again.
//
// A test points a client at Proxy.Addr instead of the server's address;
// for NATS, a worker's --nats-url or a cluster route.
package netfault
