package state

// SetDeferAggregateWrite switches m's Options.DeferAggregateWrite. The
// benchmarks use it to fill a manager without writing the aggregate after
// each report (which makes filling quadratic), then flush it once: the state
// is the same as if every report had been merged with the option unset.
func SetDeferAggregateWrite(m *Manager, on bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.opts.DeferAggregateWrite = on
}
