package flowstate

import (
	"maps"
	"slices"
)

// FlowID identifies a flow. GreptimeDB's flow ids are unsigned 32-bit.
type FlowID uint32

// FlowStateValue is the state of flows: per flow, the bytes of state in
// memory, the last execution time and the first execution time (both unix
// milliseconds). A flow may appear in any subset of the three maps. Nil maps
// are empty.
type FlowStateValue struct {
	StateSize       map[FlowID]uint64
	LastExecTimeMap map[FlowID]int64
	StartTimeMap    map[FlowID]int64
}

// Version names a state: the epoch of its lineage and its revision within it.
// Revision 0 means that no report has been merged in this epoch.
type Version struct {
	Epoch    string
	Revision uint64
}

// Fields says which of a Flow's three values are present.
type Fields uint8

// The fields of a Flow.
const (
	HasStateSize Fields = 1 << iota
	HasLastExecTime
	HasStartTime
)

// Flow is one flow's entry across the three maps of a FlowStateValue: the
// compact form that the manager, the encoders and the decoders work on. A
// list of flows is sorted by ID, each ID at most once; a flow with no field
// present is allowed and contributes nothing.
type Flow struct {
	ID           FlowID
	Has          Fields
	StateSize    uint64
	LastExecTime int64
	StartTime    int64
}

// Flows returns v as a list of flows sorted by ID.
func (v FlowStateValue) Flows() []Flow {
	return v.appendFlows(nil, make(map[FlowID]int, len(v.StateSize)))
}

// appendFlows appends v's flows to dst, sorted by ID, using index (which it
// clears) to join the three maps. It does not allocate when dst and index are
// large enough.
func (v FlowStateValue) appendFlows(dst []Flow, index map[FlowID]int) []Flow {
	clear(index)
	base := len(dst)
	at := func(id FlowID) *Flow {
		if i, ok := index[id]; ok {
			return &dst[i]
		}
		index[id] = len(dst)
		dst = append(dst, Flow{ID: id})
		return &dst[len(dst)-1]
	}
	for id, s := range v.StateSize {
		f := at(id)
		f.Has |= HasStateSize
		f.StateSize = s
	}
	for id, t := range v.LastExecTimeMap {
		f := at(id)
		f.Has |= HasLastExecTime
		f.LastExecTime = t
	}
	for id, t := range v.StartTimeMap {
		f := at(id)
		f.Has |= HasStartTime
		f.StartTime = t
	}
	slices.SortFunc(dst[base:], func(a, b Flow) int { return cmpID(a.ID, b.ID) })
	return dst
}

func cmpID(a, b FlowID) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ValueOf builds a FlowStateValue from a list of flows. Its maps are never
// nil.
func ValueOf(flows []Flow) FlowStateValue {
	v := FlowStateValue{
		StateSize:       make(map[FlowID]uint64),
		LastExecTimeMap: make(map[FlowID]int64),
		StartTimeMap:    make(map[FlowID]int64),
	}
	for _, f := range flows {
		if f.Has&HasStateSize != 0 {
			v.StateSize[f.ID] = f.StateSize
		}
		if f.Has&HasLastExecTime != 0 {
			v.LastExecTimeMap[f.ID] = f.LastExecTime
		}
		if f.Has&HasStartTime != 0 {
			v.StartTimeMap[f.ID] = f.StartTime
		}
	}
	return v
}

// Len returns the number of distinct flows v names, without sorting.
func (v FlowStateValue) Len() int {
	n := len(v.StateSize)
	for id := range v.LastExecTimeMap {
		if _, ok := v.StateSize[id]; !ok {
			n++
		}
	}
	for id := range v.StartTimeMap {
		_, inSize := v.StateSize[id]
		_, inLast := v.LastExecTimeMap[id]
		if !inSize && !inLast {
			n++
		}
	}
	return n
}

// Equal reports whether v and w hold the same flows; nil and empty maps are
// equal.
func (v FlowStateValue) Equal(w FlowStateValue) bool {
	return maps.Equal(v.StateSize, w.StateSize) &&
		maps.Equal(v.LastExecTimeMap, w.LastExecTimeMap) &&
		maps.Equal(v.StartTimeMap, w.StartTimeMap)
}
