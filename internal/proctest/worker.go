package proctest

import "regexp"

// WorkerReady matches the line a worker logs once it serves; the
// submatch is the epoch of its state.
var WorkerReady = regexp.MustCompile(`msg=serving .*epoch=(\S+)`)
