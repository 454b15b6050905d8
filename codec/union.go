package codec

import (
	"slices"

	"github.com/flowstate-io/flowstate/flowstate"
)

// entry is one flow of one map, its value as read (a time's two's
// complement bits).
type entry struct {
	id  uint32
	val uint64
}

// flush merges the map read last into d.union.
func (d *Decoder) flush() {
	if len(d.ents) == 0 {
		return
	}
	switch {
	case len(d.union) == 0:
		d.union = appendEntries(d.union, d.ents, d.entsBit)
	case !update(d.union, d.ents, d.entsBit):
		d.spare = merge(d.spare, d.union, d.ents, d.entsBit)
		d.union, d.spare = d.spare, d.union
	}
	d.ents = d.ents[:0]
}

// update sets the values of b (sorted entries of the map bit) in a (sorted
// flows) in place when both name the same flows, as the maps of a report
// mostly do, and reports whether they did.
func update(a []flowstate.Flow, b []entry, bit flowstate.Fields) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range b {
		if a[k].ID != flowstate.FlowID(b[k].id) {
			return false
		}
	}
	switch bit {
	case flowstate.HasStateSize:
		for k := range b {
			a[k].Has |= bit
			a[k].StateSize = b[k].val
		}
	case flowstate.HasLastExecTime:
		for k := range b {
			a[k].Has |= bit
			a[k].LastExecTime = int64(b[k].val)
		}
	default:
		for k := range b {
			a[k].Has |= bit
			a[k].StartTime = int64(b[k].val)
		}
	}
	return true
}

// merge writes the union of a (sorted flows) and b (sorted entries of the
// map bit) to dst[:0], sorted by ID.
func merge(dst, a []flowstate.Flow, b []entry, bit flowstate.Fields) []flowstate.Flow {
	dst = slices.Grow(dst[:0], max(len(a), len(b))) // at least the union's size
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		x, y := a[i].ID, flowstate.FlowID(b[j].id)
		switch {
		case x < y:
			dst = append(dst, a[i])
			i++
		case x > y:
			dst = appendEntries(dst, b[j:j+1], bit)
			j++
		default:
			dst = append(dst, a[i])
			set(&dst[len(dst)-1], b[j].val, bit)
			i++
			j++
		}
	}
	return appendEntries(append(dst, a[i:]...), b[j:], bit)
}

// appendEntries appends b, entries of the map bit, to dst as flows. Each
// flow is written field by field where it lies: a Flow built aside is
// written with narrow stores and copied with wide loads, which stall.
func appendEntries(dst []flowstate.Flow, b []entry, bit flowstate.Fields) []flowstate.Flow {
	n := len(dst)
	dst = slices.Grow(dst, len(b))[:n+len(b)]
	for k, e := range b {
		f := &dst[n+k]
		f.ID, f.Has, f.StateSize, f.LastExecTime, f.StartTime = flowstate.FlowID(e.id), 0, 0, 0, 0
		set(f, e.val, bit)
	}
	return dst
}

func set(f *flowstate.Flow, v uint64, bit flowstate.Fields) {
	f.Has |= bit
	switch bit {
	case flowstate.HasStateSize:
		f.StateSize = v
	case flowstate.HasLastExecTime:
		f.LastExecTime = int64(v)
	default:
		f.StartTime = int64(v)
	}
}

// inUnion reports whether flows, sorted by ID, holds id.
func inUnion(flows []flowstate.Flow, id flowstate.FlowID) bool {
	lo, hi := 0, len(flows)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if flows[m].ID < id {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo < len(flows) && flows[lo].ID == id
}

// sortEntries sorts ents by id, stably, using tmp as scratch, and returns
// the sorted entries and the other buffer. Large maps are sorted by radix
// (one pass per byte of the ids that is not the same in every id), small
// ones by insertion.
func sortEntries(ents, tmp []entry) (sorted, spare []entry) {
	n := len(ents)
	if n <= 32 {
		for k := 1; k < n; k++ {
			for m := k; m > 0 && ents[m].id < ents[m-1].id; m-- {
				ents[m], ents[m-1] = ents[m-1], ents[m]
			}
		}
		return ents, tmp
	}
	var counts [4][256]uint32
	for _, e := range ents {
		counts[0][byte(e.id)]++
		counts[1][byte(e.id>>8)]++
		counts[2][byte(e.id>>16)]++
		counts[3][byte(e.id>>24)]++
	}
	tmp = slices.Grow(tmp[:0], n)[:n]
	for pass := range 4 {
		shift := 8 * pass
		c := &counts[pass]
		if c[byte(ents[0].id>>shift)] == uint32(n) {
			continue // every id has the same byte here
		}
		var sum uint32
		for k, m := range c {
			c[k] = sum
			sum += m
		}
		for _, e := range ents {
			k := byte(e.id >> shift)
			tmp[c[k]] = e
			c[k]++
		}
		ents, tmp = tmp, ents
	}
	return ents, tmp
}
