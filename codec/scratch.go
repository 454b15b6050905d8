package codec

// A Decoder keeps its scratch buffers between reports, so that a steady
// stream of reports decodes without allocating. One outlier (a report of
// 100,000 flows, or of a million unknown fields under no limit) would
// otherwise leave them at its size for the life of the worker: settle
// drops the buffers that are far larger than the reports that follow it.
const (
	// scratchFloor is the capacity, in items, that a buffer always keeps.
	scratchFloor = 1024
	// scratchSlack: a buffer holding more than scratchSlack times the
	// items of a report is oversized for that report.
	scratchSlack = 4
	// shrinkAfter is how many reports in a row must find the buffers
	// oversized before they are dropped, so that a stream that mixes
	// large and small reports does not reallocate on every large one.
	shrinkAfter = 8
)

// settle runs after every decode, accepted or rejected.
func (d *Decoder) settle() {
	used := len(d.union) + len(d.ents) + len(d.names)
	keep := max(scratchFloor, scratchSlack*used)
	if max(cap(d.ents), cap(d.tmp), cap(d.union), cap(d.spare), cap(d.names), cap(d.hashes)) <= keep {
		d.ordinary = 0
		return
	}
	if d.ordinary++; d.ordinary < shrinkAfter {
		return
	}
	d.ordinary = 0
	d.ents = shrink(d.ents, keep)
	d.tmp = shrink(d.tmp, keep)
	d.union = shrink(d.union, keep)
	d.spare = shrink(d.spare, keep)
	d.names = shrink(d.names, keep)
	d.hashes = shrink(d.hashes, keep)
}

// shrink drops s if its capacity is over keep; the next use allocates it at
// the size it needs.
func shrink[T any](s []T, keep int) []T {
	if cap(s) > keep {
		return nil
	}
	return s
}
