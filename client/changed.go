package client

import "github.com/flowstate-io/flowstate/flowstate"

// changedFlows returns the flows of cur whose entry differs from old, and a
// flow with Has == 0 for each flow of old that cur lacks, sorted by ID.
func changedFlows(old, cur flowstate.FlowStateValue) []flowstate.Flow {
	a, b := old.Flows(), cur.Flows()
	var out []flowstate.Flow
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i].ID < b[j].ID):
			out = append(out, flowstate.Flow{ID: a[i].ID})
			i++
		case i == len(a) || b[j].ID < a[i].ID:
			out = append(out, b[j])
			j++
		default:
			if a[i] != b[j] {
				out = append(out, b[j])
			}
			i++
			j++
		}
	}
	return out
}

// mergeChanged returns the union of acc and flows, both sorted by ID,
// with the entries of flows winning.
func mergeChanged(acc, flows []flowstate.Flow) []flowstate.Flow {
	if len(acc) == 0 {
		return append(acc, flows...)
	}
	out := make([]flowstate.Flow, 0, len(acc)+len(flows))
	i, j := 0, 0
	for i < len(acc) || j < len(flows) {
		switch {
		case j == len(flows) || (i < len(acc) && acc[i].ID < flows[j].ID):
			out = append(out, acc[i])
			i++
		case i == len(acc) || flows[j].ID < acc[i].ID:
			out = append(out, flows[j])
			j++
		default:
			out = append(out, flows[j])
			i++
			j++
		}
	}
	return out
}
