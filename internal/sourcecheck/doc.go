// Package sourcecheck holds tests that read the module's own source and
// docs: that docs/design.md's walk of a heartbeat names functions where
// they are, and that no function leaves a mutex locked or unlocks one it
// did not lock. It has no code of its own.
package sourcecheck
