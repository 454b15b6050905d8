package codec

import (
	"errors"
	"fmt"

	"github.com/flowstate-io/flowstate/flowstate"
)

// ErrChunkBudget is returned by SplitAggregate when the budget cannot hold
// even one flow.
var ErrChunkBudget = errors.New("codec: chunk budget too small for one flow")

// aggregateFixedLen is the size of an aggregate's map header and its three
// field names.
const aggregateFixedLen = 1 + 3 + len("state_size") + len("last_exec_time_map") + len("start_time_map")

// flowAggregateLen is the size one flow adds to an aggregate's three maps,
// map headers aside.
func flowAggregateLen(f *flowstate.Flow) int {
	id := uintLen(uint64(f.ID))
	n := 0
	if f.Has&flowstate.HasStateSize != 0 {
		n += id + uintLen(f.StateSize)
	}
	if f.Has&flowstate.HasLastExecTime != 0 {
		n += id + intLen(f.LastExecTime)
	}
	if f.Has&flowstate.HasStartTime != 0 {
		n += id + intLen(f.StartTime)
	}
	return n
}

// SplitAggregate splits an aggregate, flows sorted by ID, into consecutive
// chunks whose AppendAggregate encodings each take at most budget bytes
// (PROTOCOL.md v2, chunked snapshots): chunk k is flows[ends[k-1]:ends[k]]
// (ends[-1] = 0), so the chunks hold ascending, disjoint id ranges that
// together are the whole aggregate. The ends are appended to dst[:0]. An
// empty aggregate is one empty chunk. Sizes are computed, not encoded: one
// pass, no writes. A budget that cannot hold one of the flows returns
// ErrChunkBudget.
func SplitAggregate(dst []int, flows []flowstate.Flow, budget int) ([]int, error) {
	ends := dst[:0]
	var n [3]int
	body := 0 // bytes of the current chunk's entries
	start := 0
	for i := range flows {
		f := &flows[i]
		add := flowAggregateLen(f)
		m := countFields(n, f.Has)
		if chunkLen(body+add, m) > budget {
			if i == start {
				return nil, fmt.Errorf("%w: flow %d takes %d bytes, budget %d", ErrChunkBudget, f.ID, chunkLen(add, m), budget)
			}
			ends = append(ends, i)
			start, n = i, countFields([3]int{}, f.Has)
			if chunkLen(add, n) > budget {
				return nil, fmt.Errorf("%w: flow %d takes %d bytes, budget %d", ErrChunkBudget, f.ID, chunkLen(add, n), budget)
			}
			body = add
			continue
		}
		body, n = body+add, m
	}
	if len(flows) == 0 && chunkLen(0, n) > budget {
		return nil, fmt.Errorf("%w: budget %d", ErrChunkBudget, budget)
	}
	return append(ends, len(flows)), nil
}

// chunkLen is the size of an aggregate of body bytes of entries with n
// entries per map.
func chunkLen(body int, n [3]int) int {
	return aggregateFixedLen + body + mapLenLen(n[0]) + mapLenLen(n[1]) + mapLenLen(n[2])
}

// countFields returns n with one more entry in each map that has names.
func countFields(n [3]int, has flowstate.Fields) [3]int {
	if has&flowstate.HasStateSize != 0 {
		n[0]++
	}
	if has&flowstate.HasLastExecTime != 0 {
		n[1]++
	}
	if has&flowstate.HasStartTime != 0 {
		n[2]++
	}
	return n
}
