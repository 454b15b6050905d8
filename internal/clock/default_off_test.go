//go:build !chaosclock

package clock

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

var leakOptions []goleak.Option

func TestDefaultIsTheRealClockInANormalBuild(t *testing.T) {
	t.Setenv(ControlEnv, filepath.Join(t.TempDir(), "clock"))
	assert.Equal(t, Real, Default(), "a control file is not followed without the chaosclock tag")
}
