package chaos

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// epochKey is the bucket's key that names its epoch (the workers'
// Flow-State-Epoch).
const epochKey = "__flow/epoch"

// hostile is a value the nemesis writes into a node key, or a delete.
type hostile struct {
	name  string
	value func() []byte // nil: a delete of the key
}

// noMaps are the two maps a value below leaves empty.
const noMaps = `,"last_exec_time_map":{},"start_time_map":{}}`

var hostiles = []hostile{
	{"garbage bytes", fixed("\xc1\xff\x00not json")},
	{"an empty value", fixed("")},
	{"JSON of another shape (an array)", fixed(`[1,2,3]`)},
	{"JSON whose state_size is an array", fixed(`{"state_size":[1,2]` + noMaps)},
	{"JSON with a flow id that is not decimal", fixed(`{"state_size":{"x1":5}` + noMaps)},
	{"JSON with a flow id past uint32", fixed(`{"state_size":{"4294967297":5}` + noMaps)},
	{"JSON with a negative state size", fixed(`{"state_size":{"1":-5}` + noMaps)},
	{"JSON with a field twice", fixed(`{"state_size":{"1":5},"state_size":{"2":6}` + noMaps)},
	{"JSON cut short", fixed(`{"state_size":{"1":5`)},
	{"JSON with nine retired epochs", fixed(`{"state_size":{"1":5},"last_exec_time_map":{},"start_time_map":{},"node_epoch":10,"seq":1,"retired_epochs":[1,2,3,4,5,6,7,8,9]}`)},
	{"1 MB of junk", junk},
	{"a delete", nil},
}

func fixed(s string) func() []byte { return func() []byte { return []byte(s) } }

// junk is a 1,000,000-byte value that is not JSON (below the servers'
// 1 MB max payload).
func junk() []byte {
	b := make([]byte, 1_000_000)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}

// corruptFault writes a hostile value into the key of a node the clients
// report for, or deletes the key, from outside the workers. By the rule
// every worker applies (PROTOCOL.md, "What a worker applies from a shared
// store") the node is then absent, as if it had sent an empty report: the
// write goes into the history as that report, acked at the write's
// revision in the epoch the bucket had around it (or of unknown outcome).
func (n *nemesis) corruptFault() *fault {
	node := n.rng.IntN(nNodes)
	v := hostiles[n.rng.IntN(len(hostiles))]
	f := &fault{kind: kindCorrupt, what: fmt.Sprintf("write %s into node %d's key", v.name, node+1)}
	if v.value == nil {
		f.what = fmt.Sprintf("delete node %d's key", node+1)
	}
	f.inject = func() error {
		msg := &nats.Msg{Subject: "$KV." + bucket + "." + nodeKey(node), Header: nats.Header{}}
		if v.value == nil {
			msg.Header.Set("KV-Operation", "DEL")
		} else {
			msg.Data = v.value()
		}
		o := op{client: n.id, in: input{kind: opReport, node: node, why: "nemesis: " + f.what}}
		before, berr := n.epoch()
		o.call = n.h.now()
		ack, err := n.publish(msg)
		o.ret = n.h.now()
		after, aerr := n.epoch()
		switch {
		case err != nil:
			o.out = output{status: stUnknown, code: err.Error()}
			f.what += ": " + err.Error()
		case berr != nil || aerr != nil || before != after || before.rev > ack.Sequence:
			o.out = output{status: stUnknown, code: "the epoch changed around the write"}
		default:
			o.out = output{status: stOK, epoch: before.value, rev: ack.Sequence}
			f.what += " at revision " + strconv.FormatUint(ack.Sequence, 10)
		}
		o.in.call, o.in.ret = o.call, o.ret
		n.h.add(o)
		return nil
	}
	return f
}

// nodeKey is the bucket key of node index i (node id i+1).
func nodeKey(i int) string { return "__flow/state/node/" + strconv.Itoa(i+1) }

type epochAt struct {
	value string
	rev   uint64
}

// epoch reads the bucket's epoch key from the stream's leader.
func (n *nemesis) epoch() (epochAt, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	kv, err := n.js.KeyValue(ctx, bucket)
	if err != nil {
		return epochAt{}, err
	}
	e, err := kv.Get(ctx, epochKey)
	if err != nil {
		return epochAt{}, err
	}
	return epochAt{string(e.Value()), e.Revision()}, nil
}
