package loadgen

import (
	"strings"

	"github.com/flowstate-io/flowstate/codec"
	"github.com/flowstate-io/flowstate/flowstate"
)

// Rounds is how many different reports each node cycles through: report r
// of a node is the same as report r+Rounds.
const Rounds = 8

// BaseMs is the unix ms time the reports' times count from.
const BaseMs = 1_700_000_000_000

// encodeBudget bounds the bytes of reports encoded ahead of a load; a load
// whose reports do not fit encodes each report as it sends it.
const encodeBudget = 64 << 20

// payloads are the reports of a load's nodes, indexed from 0 (the node
// FirstNode).
type payloads struct {
	first, nodes, flows int
	health              bool
	subjects            []string // of each node
	buf                 []byte   // every report, round after round; nil: encode as sent
	offs                []int    // report (round, i) is buf[offs[round*nodes+i]:offs[round*nodes+i+1]]
}

func newPayloads(cfg Config, heartbeat func(uint64) string) *payloads {
	p := &payloads{first: cfg.FirstNode, nodes: cfg.Nodes, flows: cfg.Flows, health: cfg.Health, subjects: make([]string, cfg.Nodes)}
	for i := range cfg.Nodes {
		p.subjects[i] = heartbeat(uint64(cfg.FirstNode + i))
	}
	one := ReportSize(cfg)
	if (one+8)*cfg.Nodes*Rounds > encodeBudget {
		return p
	}
	p.offs = make([]int, 0, Rounds*cfg.Nodes+1)
	p.buf = make([]byte, 0, (one+8)*cfg.Nodes*Rounds)
	var r codec.Report
	for round := range uint64(Rounds) {
		for i := range cfg.Nodes {
			p.offs = append(p.offs, len(p.buf))
			p.buf = codec.AppendReport(p.buf, p.report(&r, i, round))
		}
	}
	p.offs = append(p.offs, len(p.buf))
	return p
}

// report sets r to report round of node i and returns it: all three
// fields of each of the node's flows.
func (p *payloads) report(r *codec.Report, i int, round uint64) *codec.Report {
	r.NodeID, r.NodeEpoch, r.HasNodeEpoch = uint64(p.first+i), BaseMs, true
	r.Flows = p.flowsOf(r.Flows[:0], i, round)
	r.Health = flowstate.Health{}
	if p.health {
		r.Health = p.healthOf(r.Flows, round)
	}
	return r
}

// HealthErrorBytes is the size of the error message each flow of a
// Config.Health load reports.
const HealthErrorBytes = 200

// errorMessage is the message of every error of a Config.Health load.
var errorMessage = strings.Repeat("x", HealthErrorBytes)

// healthOf returns the health of report round of the flows: the rows each
// processed, growing round after round, and one error.
func (p *payloads) healthOf(flows []flowstate.Flow, round uint64) flowstate.Health {
	round %= Rounds
	h := flowstate.Health{HasProcessedRows: true, HasLastErrors: true, Flows: make([]flowstate.FlowHealth, len(flows))}
	for k, f := range flows {
		h.Flows[k] = flowstate.FlowHealth{ID: f.ID, Has: flowstate.HasProcessedRows | flowstate.HasLastErrors,
			ProcessedRows: 1000 * (round + 1),
			LastErrors:    []flowstate.FlowError{{Time: f.LastExecTime, Message: errorMessage}}}
	}
	return h
}

// flowsOf appends the flows of report round of node i to dst.
func (p *payloads) flowsOf(dst []flowstate.Flow, i int, round uint64) []flowstate.Flow {
	round %= Rounds
	base := flowstate.FlowID((p.first + i) * p.flows)
	for k := 1; k <= p.flows; k++ {
		dst = append(dst, flowstate.Flow{
			ID:           base + flowstate.FlowID(k),
			Has:          flowstate.HasStateSize | flowstate.HasLastExecTime | flowstate.HasStartTime,
			StateSize:    uint64(k)<<12 + round,
			LastExecTime: BaseMs + int64(round)*1000 + int64(k),
			StartTime:    BaseMs,
		})
	}
	return dst
}

// body returns report round of node i: encoded ahead, or encoded into
// scratch (which it returns for reuse).
func (p *payloads) body(scratch *[]byte, r *codec.Report, i int, round uint64) []byte {
	if p.buf != nil {
		j := int(round%Rounds)*p.nodes + i
		return p.buf[p.offs[j]:p.offs[j+1]]
	}
	*scratch = codec.AppendReport((*scratch)[:0], p.report(r, i, round))
	return *scratch
}

// ReportSize returns the bytes of one report of cfg's last node.
func ReportSize(cfg Config) int {
	p := payloads{first: cfg.FirstNode, flows: cfg.Flows, health: cfg.Health}
	var r codec.Report
	return len(codec.AppendReport(nil, p.report(&r, cfg.Nodes-1, 0)))
}

// Flows returns the flows of report round of cfg's node i (node id
// cfg.FirstNode+i): what a worker writes of that report.
func Flows(cfg Config, i int, round uint64) []flowstate.Flow {
	p := payloads{first: cfg.FirstNode, flows: cfg.Flows}
	return p.flowsOf(nil, i, round)
}
