package state

import (
	"cmp"
	"slices"

	"github.com/flowstate-io/flowstate/flowstate"
)

// The contributions to one flow of the Aggregate and their per-field max.
// A node's contribution keeps its index (slot) in contribs, and the node
// keeps that slot beside the flow, so that an update finds it without a
// search. Removing a contribution moves the last one into its slot and
// tells that one's node. Past smallContribs contributions, each field has a
// max-heap of slots, so that an update costs O(log k) rather than a scan.

// add appends node n's contribution f and returns its slot.
func (e *aggFlow) add(n *aggNode, f flowstate.Flow) int32 {
	slot := int32(len(e.contribs))
	e.contribs = append(e.contribs, contrib{node: n, flow: f, pos: [numFields]int32{-1, -1, -1}})
	switch {
	case e.large:
		for k := range numFields {
			if f.Has&fieldBits[k] != 0 {
				e.push(k, slot)
			}
		}
	case len(e.contribs) > smallContribs:
		e.build()
	}
	return slot
}

// set replaces the contribution at slot with *f and reports whether the
// entry changed. f is a pointer: a Flow passed in registers is spilled
// field by field and read back whole, a stalled store-to-load forward on
// every flow of every report.
func (e *aggFlow) set(slot int32, f *flowstate.Flow) bool {
	c := &e.contribs[slot]
	old := c.flow
	c.flow = *f
	if e.large {
		for k := range numFields {
			had, has := old.Has&fieldBits[k] != 0, f.Has&fieldBits[k] != 0
			switch {
			case had && has:
				// Most values repeat from one report to the next (a start
				// time, often a state size): leave the heap alone then.
				switch cmpField(f, &old, k) {
				case 1:
					e.up(k, c.pos[k])
				case -1:
					e.down(k, c.pos[k])
				}
			case has:
				e.push(k, slot)
			case had:
				e.heapRemove(k, c.pos[k])
			}
		}
	}
	return e.recompute()
}

// remove removes the contribution at slot; the caller recomputes.
func (e *aggFlow) remove(slot int32) {
	if e.large {
		for k := range numFields {
			if p := e.contribs[slot].pos[k]; p >= 0 {
				e.heapRemove(k, p)
			}
		}
	}
	last := int32(len(e.contribs) - 1)
	if slot != last {
		e.contribs[slot] = e.contribs[last]
		m := &e.contribs[slot]
		if e.large {
			for k := range numFields {
				if p := m.pos[k]; p >= 0 {
					e.heaps[k][p] = slot
				}
			}
		}
		i, _ := slices.BinarySearchFunc(m.node.flows, e.agg.ID, func(x flowstate.Flow, id flowstate.FlowID) int { return cmp.Compare(x.ID, id) })
		m.node.slots[i] = slot
	}
	e.contribs[last] = contrib{}
	e.contribs = e.contribs[:last]
	if e.large && len(e.contribs) <= smallContribs/2 {
		e.large = false
		for k := range numFields {
			e.heaps[k] = e.heaps[k][:0]
		}
	}
}

// recompute sets e.agg to the per-field max of the contributions and
// reports whether it changed.
func (e *aggFlow) recompute() bool {
	agg := flowstate.Flow{ID: e.agg.ID}
	switch {
	case e.large:
		if h := e.heaps[0]; len(h) > 0 {
			agg.Has, agg.StateSize = agg.Has|flowstate.HasStateSize, e.contribs[h[0]].flow.StateSize
		}
		if h := e.heaps[1]; len(h) > 0 {
			agg.Has, agg.LastExecTime = agg.Has|flowstate.HasLastExecTime, e.contribs[h[0]].flow.LastExecTime
		}
		if h := e.heaps[2]; len(h) > 0 {
			agg.Has, agg.StartTime = agg.Has|flowstate.HasStartTime, e.contribs[h[0]].flow.StartTime
		}
	case len(e.contribs) == 1:
		agg = e.contribs[0].flow
	default:
		for i := range e.contribs {
			f := &e.contribs[i].flow
			if f.Has&flowstate.HasStateSize != 0 && (agg.Has&flowstate.HasStateSize == 0 || f.StateSize > agg.StateSize) {
				agg.StateSize = f.StateSize
			}
			if f.Has&flowstate.HasLastExecTime != 0 && (agg.Has&flowstate.HasLastExecTime == 0 || f.LastExecTime > agg.LastExecTime) {
				agg.LastExecTime = f.LastExecTime
			}
			if f.Has&flowstate.HasStartTime != 0 && (agg.Has&flowstate.HasStartTime == 0 || f.StartTime > agg.StartTime) {
				agg.StartTime = f.StartTime
			}
			agg.Has |= f.Has
		}
	}
	if agg == e.agg {
		return false
	}
	e.agg = agg
	return true
}

// build switches e to heaps.
func (e *aggFlow) build() {
	e.large = true
	for k := range numFields {
		h := e.heaps[k][:0]
		for s := range e.contribs {
			c := &e.contribs[s]
			c.pos[k] = -1
			if c.flow.Has&fieldBits[k] != 0 {
				c.pos[k] = int32(len(h))
				h = append(h, int32(s))
			}
		}
		e.heaps[k] = h
		for i := int32(len(h))/2 - 1; i >= 0; i-- {
			e.down(k, i)
		}
	}
}

// above reports whether slot x's field k ranks above slot y's.
func (e *aggFlow) above(k int, x, y int32) bool {
	return cmpField(&e.contribs[x].flow, &e.contribs[y].flow, k) > 0
}

// cmpField compares field k of a and b.
func cmpField(a, b *flowstate.Flow, k int) int {
	switch k {
	case 0:
		return cmp.Compare(a.StateSize, b.StateSize)
	case 1:
		return cmp.Compare(a.LastExecTime, b.LastExecTime)
	}
	return cmp.Compare(a.StartTime, b.StartTime)
}

func (e *aggFlow) swap(k int, i, j int32) {
	h := e.heaps[k]
	h[i], h[j] = h[j], h[i]
	e.contribs[h[i]].pos[k] = i
	e.contribs[h[j]].pos[k] = j
}

func (e *aggFlow) up(k int, i int32) {
	h := e.heaps[k]
	for i > 0 {
		p := (i - 1) / 2
		if !e.above(k, h[i], h[p]) {
			return
		}
		e.swap(k, i, p)
		i = p
	}
}

// down sifts heap position i down and reports whether it moved.
func (e *aggFlow) down(k int, i int32) bool {
	h := e.heaps[k]
	n, i0 := int32(len(h)), i
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && e.above(k, h[r], h[c]) {
			c = r
		}
		if !e.above(k, h[c], h[i]) {
			break
		}
		e.swap(k, i, c)
		i = c
	}
	return i > i0
}

func (e *aggFlow) fix(k int, i int32) {
	if !e.down(k, i) {
		e.up(k, i)
	}
}

func (e *aggFlow) push(k int, slot int32) {
	e.heaps[k] = append(e.heaps[k], slot)
	i := int32(len(e.heaps[k]) - 1)
	e.contribs[slot].pos[k] = i
	e.up(k, i)
}

func (e *aggFlow) heapRemove(k int, i int32) {
	h := e.heaps[k]
	last := int32(len(h) - 1)
	gone := h[i]
	if i != last {
		e.swap(k, i, last)
	}
	e.heaps[k] = h[:last]
	e.contribs[gone].pos[k] = -1
	if i != last {
		e.fix(k, i)
	}
}
