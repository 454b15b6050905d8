package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// kind is what a scenario measures.
type kind int

const (
	kindFlood    kind = iota // raw ceiling, then the worker, both as fast as possible
	kindGet                  // get latency under a paced ingest
	kindHold                 // resident memory holding every node's report
	kindAcked                // acked reports against a backend (jetstream.go)
	kindDelta                // bytes of delta against full updates (delta.go)
	kindFollow               // a frontend following deltas against flow.state (follow.go)
	kindSnapshot             // a 1,000,000-flow snapshot in chunks (snapshot.go)
	kindFanout               // slow subscribers of the full updates (fanout.go)
)

// scenario is one line of the summary.
type scenario struct {
	name         string
	kind         kind
	nodes, flows int
	health       bool     // v3 health in every report (loadgen.Config.Health)
	backend      *backend // kindAcked: where the state lives
	workerArgs   []string // of the worker, past the defaults
}

// healthScenario is the 1000x10 flood with protocol v3's health in every
// report: per flow the rows processed and one 200-byte error.
var healthScenario = scenario{name: "1000x10-v3", kind: kindFlood, nodes: 1000, flows: 10, health: true}

// The scenarios of --scenarios all.
var defaultScenarios = []scenario{
	{name: "100x10", kind: kindFlood, nodes: 100, flows: 10},
	{name: "1000x10", kind: kindFlood, nodes: 1000, flows: 10},
	{name: "10000x10", kind: kindFlood, nodes: 10000, flows: 10},
	{name: "1000x100", kind: kindFlood, nodes: 1000, flows: 100},
	healthScenario,
	{name: "get", kind: kindGet, nodes: 1000, flows: 10},
	{name: "rss", kind: kindHold, nodes: 10000, flows: 10},
	deltaScenario,
	followScenarios[0],
	followScenarios[1],
	ackedScenarios[0],
	ackedScenarios[1],
	ackedScenarios[2],
}

const defaultScenarioNames = "100x10,1000x10,10000x10,1000x100,1000x10-v3,get,rss,delta,follow-1k,follow-10k,acked,js-r1,js-r3"

// pendingScenarioNames are the scenarios run only when named: the
// 1,000,000-flow snapshot, which holds a large state for a while, and the
// fan-out, whose server holds up to 2.4 GB.
const pendingScenarioNames = "snapshot,fanout,fanout-5s,js-r3-sync"

// named returns the scenario of --scenarios called name, if there is one.
func named(name string) (scenario, bool) {
	for _, d := range slices.Concat(defaultScenarios, ackedScenarios, []scenario{snapshotScenario}, fanoutScenarios) {
		if d.name == name {
			return d, true
		}
	}
	return scenario{}, false
}

// holdRounds is how many reports of each node the rss scenario sends.
const holdRounds = 3

// parseScenarios parses --scenarios: names, NxF, and all for the default
// scenarios.
func parseScenarios(s string) ([]scenario, error) {
	var out []scenario
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "all" {
			out = append(out, defaultScenarios...)
			continue
		}
		if d, ok := named(name); ok {
			out = append(out, d)
			continue
		}
		n, f, ok := strings.Cut(name, "x")
		nodes, err1 := strconv.Atoi(n)
		flows, err2 := strconv.Atoi(f)
		if !ok || err1 != nil || err2 != nil || nodes <= 0 || flows <= 0 || nodes*flows > 1<<30 {
			return nil, fmt.Errorf("--scenarios: %q is not NxF (positive nodes x flows per node), get, rss, all, %s", name, pendingScenarioNames)
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
	case kindAcked:
		return fmt.Sprintf("%s %dx%d, %d in flight", s.name, s.nodes, s.flows, ackedInFlight)
	case kindDelta:
		return fmt.Sprintf("delta %dx%d @%d/s", s.nodes, s.flows, deltaRate)
	case kindFollow:
		return fmt.Sprintf("%s %dx%d @%d/s", s.name, s.nodes, s.flows, deltaRate)
	case kindSnapshot:
		return fmt.Sprintf("snapshot %dx%d", s.nodes, s.flows)
	case kindFanout:
		return fmt.Sprintf("%s %dx%d, %d slow subscribers", s.name, s.nodes, s.flows, fanoutSubscribers)
	}
	return s.name
}

// runResult is one run of a scenario; raw and ingest are nil when the
// scenario does not measure them.
type runResult struct {
	raw      *rawResult
	ingest   *ingestResult
	hold     *holdResult
	acked    *ackedResult
	delta    *deltaResult
	follow   *followResult
	snapshot *snapshotResult
	fanout   *fanoutResult
}

// check returns the check of the run's final aggregate; nil if none.
func (r runResult) check() *aggCheck {
	switch {
	case r.ingest != nil:
		return &r.ingest.check
	case r.hold != nil:
		return &r.hold.check
	case r.acked != nil:
		return &r.acked.check
	case r.delta != nil:
		return &r.delta.check
	case r.follow != nil:
		return &r.follow.check
	case r.snapshot != nil:
		return &r.snapshot.check
	case r.fanout != nil:
		return &r.fanout.check
	}
	return nil
}

// scenarioResult is every run of a scenario.
type scenarioResult struct {
	scenario scenario
	runs     []runResult
}
