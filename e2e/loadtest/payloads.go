package main

import (
	"strconv"

	"flowstate/codec"
	"flowstate/flowstate"
)

// prefix is the worker's default subject prefix.
const prefix = "flow"

// payloadBudget bounds the bytes of pre-encoded reports of a scenario.
const payloadBudget = 64 << 20

// baseMs is the unix ms time the reports' times are counted from.
const baseMs = 1_700_000_000_000

// payloads are a scenario's heartbeat reports, encoded once with
// codec.AppendReport: rounds reports of each node, so that a node's report
// always differs from its previous one and every report changes the
// aggregate. Node i (0 to nodes-1) owns the flow ids i*flows+1 to
// i*flows+flows.
type payloads struct {
	nodes, flows, rounds int
	subjects             []string // of each node: flow.heartbeat.<i>
	buf                  []byte   // every report, round after round
	offs                 []int    // report (r, i) is buf[offs[r*nodes+i]:offs[r*nodes+i+1]]
}

func encodePayloads(nodes, flows int) *payloads {
	p := &payloads{nodes: nodes, flows: flows, subjects: make([]string, nodes)}
	for i := range nodes {
		p.subjects[i] = prefix + ".heartbeat." + strconv.Itoa(i)
	}
	var r codec.Report
	one := len(codec.AppendReport(nil, p.report(&r, nodes-1, 0)))
	p.rounds = min(max(payloadBudget/(one*nodes), 2), 8)
	p.offs = make([]int, 0, p.rounds*nodes+1)
	p.buf = make([]byte, 0, (one+8)*nodes*p.rounds)
	for round := range p.rounds {
		for i := range nodes {
			p.offs = append(p.offs, len(p.buf))
			p.buf = codec.AppendReport(p.buf, p.report(&r, i, round))
		}
	}
	p.offs = append(p.offs, len(p.buf))
	return p
}

// report sets r to round round of node i's report, with all three fields of
// each of its flows, and returns it.
func (p *payloads) report(r *codec.Report, i, round int) *codec.Report {
	r.NodeID, r.NodeEpoch, r.HasNodeEpoch = uint64(i), baseMs, true
	r.Flows = r.Flows[:0]
	for k := 1; k <= p.flows; k++ {
		r.Flows = append(r.Flows, flowstate.Flow{
			ID:           flowstate.FlowID(i*p.flows + k),
			Has:          flowstate.HasStateSize | flowstate.HasLastExecTime | flowstate.HasStartTime,
			StateSize:    uint64(k)<<12 + uint64(round),
			LastExecTime: baseMs + int64(round)*1000 + int64(k),
			StartTime:    baseMs,
		})
	}
	return r
}

// of returns the subject and body of node i's report of round round (taken
// modulo the rounds encoded).
func (p *payloads) of(i int, round uint64) (string, []byte) {
	j := int(round%uint64(p.rounds))*p.nodes + i
	return p.subjects[i], p.buf[p.offs[j]:p.offs[j+1]]
}

// at returns the k-th report of the round-robin: node k mod nodes, round
// k / nodes.
func (p *payloads) at(k uint64) (string, []byte) {
	return p.of(int(k%uint64(p.nodes)), k/uint64(p.nodes))
}

// size returns the bytes of one report.
func (p *payloads) size() int { return p.offs[1] - p.offs[0] }
