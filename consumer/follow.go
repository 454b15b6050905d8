package consumer

// With a manager that follows a shared store (flowstate.Manager.Follow),
// changes come from every worker's reports, through the store's watch, and
// only the worker that holds the publisher lease publishes: the manager
// signals its changes, and its Flush refuses (flowstate.ErrNotPublisher) on
// the others, which then publish nothing. A worker that becomes the
// publisher is signalled too, and publishes its state at once.

// forwardChanges kicks the publisher on every change the manager signals,
// until stopForwarding. It does nothing when the manager does not follow a
// store: then the heartbeat handler kicks the publisher itself.
func (w *Worker) forwardChanges() {
	changes := w.mgr.Changes()
	if changes == nil {
		return
	}
	w.fwdStop, w.fwdDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(w.fwdDone)
		for {
			select {
			case <-changes:
				w.pub.changed()
			case <-w.fwdStop:
				return
			}
		}
	}()
}

// stopForwarding stops forwardChanges and waits for it.
func (w *Worker) stopForwarding() {
	if w.fwdStop == nil {
		return
	}
	close(w.fwdStop)
	<-w.fwdDone
}
