//go:build chaosclock

package clock

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// The clock Default follows lives as long as the process.
var leakOptions = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/flowstate-io/flowstate/internal/clock.(*Controlled).run"),
	goleak.IgnoreTopFunction("github.com/flowstate-io/flowstate/internal/clock.(*Controlled).Follow"),
}

// Built with the chaosclock tag, Default follows the file ControlEnv names:
// a jump written there shows in its readings.
func TestDefaultFollowsTheControlFileWithTheTag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "clock")
	require.NoError(t, os.Setenv(ControlEnv, path))
	c := Default()
	require.IsType(t, &Controlled{}, c)
	require.NoError(t, WriteControl(path, Control{Offset: 50 * time.Second, Rate: 1}))
	require.Eventually(t, func() bool { return c.Since(time.Now()) > 45*time.Second }, 10*time.Second, ControlPoll)
}
