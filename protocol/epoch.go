package protocol

// MaxEpochLen is the longest epoch (PROTOCOL.md, Flow-State-Epoch).
const MaxEpochLen = 64

// ValidEpoch reports whether e may name a state's lineage: 1 to
// MaxEpochLen printable ASCII characters ('!' to '~'). A worker replaces
// an epoch read from its store that is not, as a missing one, and never
// serves, logs or prints it; a client refuses a reply or an update that
// carries one.
func ValidEpoch[S ~string | ~[]byte](e S) bool {
	if len(e) == 0 || len(e) > MaxEpochLen {
		return false
	}
	for i := 0; i < len(e); i++ {
		if e[i] < '!' || e[i] > '~' {
			return false
		}
	}
	return true
}
