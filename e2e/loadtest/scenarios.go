package main

import (
	"fmt"
	"strconv"
	"strings"
)

// kind is what a scenario measures.
type kind int

const (
	kindFlood kind = iota // raw ceiling, then the worker, both as fast as possible
	kindGet               // get latency under a paced ingest
	kindHold              // resident memory holding every node's report
)

// scenario is one line of the summary.
type scenario struct {
	name         string
	kind         kind
	nodes, flows int
}

// The scenarios of --scenarios all.
var defaultScenarios = []scenario{
	{name: "100x10", kind: kindFlood, nodes: 100, flows: 10},
	{name: "1000x10", kind: kindFlood, nodes: 1000, flows: 10},
	{name: "10000x10", kind: kindFlood, nodes: 10000, flows: 10},
	{name: "1000x100", kind: kindFlood, nodes: 1000, flows: 100},
	{name: "get", kind: kindGet, nodes: 1000, flows: 10},
	{name: "rss", kind: kindHold, nodes: 10000, flows: 10},
}

const defaultScenarioNames = "100x10,1000x10,10000x10,1000x100,get,rss"

// holdRounds is how many reports of each node the rss scenario sends.
const holdRounds = 3

func parseScenarios(s string) ([]scenario, error) {
	if s == "all" {
		return defaultScenarios, nil
	}
	var out []scenario
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "get" || name == "rss" {
			for _, d := range defaultScenarios {
				if d.name == name {
					out = append(out, d)
				}
			}
			continue
		}
		n, f, ok := strings.Cut(name, "x")
		nodes, err1 := strconv.Atoi(n)
		flows, err2 := strconv.Atoi(f)
		if !ok || err1 != nil || err2 != nil || nodes <= 0 || flows <= 0 || nodes*flows > 1<<30 {
			return nil, fmt.Errorf("--scenarios: %q is not NxF (positive nodes x flows per node), get or rss", name)
		}
		out = append(out, scenario{name: name, kind: kindFlood, nodes: nodes, flows: flows})
	}
	return out, nil
}

// label names a scenario in the summary.
func (s scenario) label(cfg config) string {
	switch s.kind {
	case kindGet:
		return fmt.Sprintf("get %dx%d @%s/s", s.nodes, s.flows, count(cfg.getLoadRate))
	case kindHold:
		return fmt.Sprintf("rss %dx%d held", s.nodes, s.flows)
	}
	return s.name
}

// runResult is one run of a scenario; raw and ingest are nil when the
// scenario does not measure them.
type runResult struct {
	raw    *rawResult
	ingest *ingestResult
	hold   *holdResult
}

// check returns the check of the run's final aggregate; nil if none.
func (r runResult) check() *aggCheck {
	switch {
	case r.ingest != nil:
		return &r.ingest.check
	case r.hold != nil:
		return &r.hold.check
	}
	return nil
}

// scenarioResult is every run of a scenario.
type scenarioResult struct {
	scenario scenario
	runs     []runResult
}
