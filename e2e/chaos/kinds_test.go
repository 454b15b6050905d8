package chaos

import (
	"fmt"
	"slices"
	"strings"
)

// The fault kinds CHAOS_FAULTS names.
const (
	kindProcess   = "process"   // kill, pause, restart of workers and servers; purge
	kindPartition = "partition" // links stalled, cut or held one way (JetStream)
	kindDisk      = "disk"      // a server's store filled, then freed (JetStream, needs mount)
	kindCorrupt   = "corrupt"   // hostile values and deletes written into node keys (JetStream)
	kindClock     = "clock"     // a worker's clock jumped, sped up or slowed down (a worker built with chaosclock)
	kindForget    = "forget"    // server stores rolled back to a snapshot: all (a power loss) or one replica (JetStream)
	kindCombo     = "combo"     // sometimes two of the above at once
	kindNone      = "none"      // alone: no fault at all, the clients only
)

// allKinds are the kinds in the order they are listed.
var allKinds = []string{kindProcess, kindPartition, kindDisk, kindCorrupt, kindClock, kindForget, kindCombo}

// readyKinds are those a run injects when CHAOS_FAULTS is unset: all of
// them.
var readyKinds = allKinds

// faultSet is what a run injects.
type faultSet struct {
	kinds []string // fault kinds, without combo
	combo bool
}

func (f faultSet) has(k string) bool { return slices.Contains(f.kinds, k) }

func (f faultSet) String() string {
	if len(f.kinds) == 0 {
		return kindNone
	}
	k := f.kinds
	if f.combo {
		k = append(slices.Clone(k), kindCombo)
	}
	return strings.Join(k, ",")
}

// parseFaults reads CHAOS_FAULTS: a comma-separated list of kinds ("" is
// readyKinds).
func parseFaults(env string) (faultSet, error) {
	names := readyKinds
	if strings.TrimSpace(env) != "" {
		names = strings.Split(env, ",")
	}
	var f faultSet
	if strings.TrimSpace(env) == kindNone {
		return f, nil // the clients alone, no fault: what the faults cost is measured against it
	}
	for _, name := range names {
		name = strings.TrimSpace(name)
		switch {
		case name == kindCombo:
			f.combo = true
		case slices.Contains(allKinds, name):
			if !f.has(name) {
				f.kinds = append(f.kinds, name)
			}
		default:
			return f, fmt.Errorf("CHAOS_FAULTS: no fault kind %q; the kinds are %s (for example CHAOS_FAULTS=partition,process)",
				name, strings.Join(allKinds, ", "))
		}
	}
	if len(f.kinds) == 0 {
		return f, fmt.Errorf("CHAOS_FAULTS=%q names no fault kind to inject besides combo; for example CHAOS_FAULTS=partition,process,combo (or none, for no fault)", env)
	}
	return f, nil
}

// forMemory returns the kinds that apply to a memory worker on its own
// server: the process faults, if named.
func (f faultSet) forMemory() faultSet {
	if f.has(kindProcess) {
		return faultSet{kinds: []string{kindProcess}}
	}
	return faultSet{}
}
