package main

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// embeddedMaxPayload is the max payload of the embedded server.
const embeddedMaxPayload = 8 << 20

// startEmbedded starts an in-process NATS server listening on listen
// (host:port; port 0 picks a free port) and waits until it takes
// connections.
func startEmbedded(listen string) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, err
	}
	if port == 0 {
		port = server.RANDOM_PORT // the server's "any free port"; its 0 means 4222
	}
	if host == "" {
		host = "0.0.0.0"
	}
	s, err := server.NewServer(&server.Options{
		Host:   host,
		Port:   port,
		NoSigs: true, // the worker handles signals and drains first
		NoLog:  true,
		// The aggregate grows by about 32 bytes a flow (JSON: 70); 8 MiB
		// holds some 100,000 flows where NATS's default 1 MiB stops near
		// 30,000. An external server's max_payload is its operator's.
		MaxPayload: embeddedMaxPayload,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded NATS server: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded NATS server did not listen on %s within 10s (is the port taken?)", listen)
	}
	return s, nil
}
