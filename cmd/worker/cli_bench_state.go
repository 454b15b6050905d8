package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowstate-io/flowstate/consumer"
	"github.com/flowstate-io/flowstate/internal/loadgen"
	"github.com/flowstate-io/flowstate/protocol"
)

// namedNodes is how many node ids a refusal names.
const namedNodes = 5

// checkEmptyState refuses to bench a state that already holds nodes: the
// simulated flows would reach the frontends of a real state, and the
// reports of the nodes bench overwrites would be lost until their next
// heartbeat. It reads the worker's node view.
func checkEmptyState(ctx context.Context, nc *nats.Conn, prefix string, cfg loadgen.Config, timeout time.Duration) error {
	req := nats.NewMsg(protocol.SubjectsOf(prefix).Nodes)
	req.Header.Set(protocol.HeaderAccept, protocol.ContentTypeJSON)
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	msg, err := nc.RequestMsgWithContext(rctx, req)
	if err != nil {
		return fmt.Errorf("before the load: the node view of prefix %q: %v; give --force to bench without checking that the state is empty", prefix, err)
	}
	if code := msg.Header.Get(protocol.HeaderErrorCode); code != "" {
		return fmt.Errorf("before the load: the node view of prefix %q: %s %s; give --force to bench without checking that the state is empty",
			prefix, code, msg.Header.Get(protocol.HeaderError))
	}
	var nodes []consumer.NodeView
	if err := json.Unmarshal(msg.Data, &nodes); err != nil {
		return fmt.Errorf("before the load: the node view of prefix %q does not parse: %v", prefix, err)
	}
	if len(nodes) == 0 {
		return nil
	}
	first, last := uint64(cfg.FirstNode), uint64(cfg.FirstNode+cfg.Nodes-1)
	var held, overwritten []uint64
	for _, n := range nodes {
		held = append(held, n.NodeID)
		if n.NodeID >= first && n.NodeID <= last {
			overwritten = append(overwritten, n.NodeID)
		}
	}
	slices.Sort(held)
	slices.Sort(overwritten)
	what := fmt.Sprintf("the state of prefix %q holds %d node(s) (%s): bench would write its %d simulated nodes (%d to %d) into the aggregate its frontends read",
		prefix, len(held), listIDs(held), cfg.Nodes, first, last)
	if len(overwritten) > 0 {
		what += fmt.Sprintf(" and overwrite the reports of nodes %s", listIDs(overwritten))
	}
	return fmt.Errorf("%s; bench a worker of its own (one started with --prefix bench, and bench --prefix bench), or give --force to write into this state", what)
}

// listIDs names the first namedNodes ids.
func listIDs(ids []uint64) string {
	var b strings.Builder
	for i, id := range ids {
		if i == namedNodes {
			fmt.Fprintf(&b, ", ... %d more", len(ids)-namedNodes)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatUint(id, 10))
	}
	return b.String()
}
