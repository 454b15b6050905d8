package jetstream

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMajorMinor(t *testing.T) {
	for _, tc := range []struct {
		v            string
		major, minor int
		ok           bool
	}{
		{"2.10.27", 2, 10, true},
		{"2.11.0", 2, 11, true},
		{"v2.12.1-RC.2", 2, 12, true},
		{"2.9.10", 2, 9, true},
		{"", 0, 0, false},
		{"dev", 0, 0, false},
		{"2.x.1", 2, 0, false},
	} {
		major, minor, ok := majorMinor(tc.v)
		assert.Equal(t, tc.ok, ok, tc.v)
		if tc.ok {
			assert.Equal(t, [2]int{tc.major, tc.minor}, [2]int{major, minor}, tc.v)
		}
	}
}

func TestServerTooOldErrorIsOneLineNamingBothVersions(t *testing.T) {
	for _, err := range []*ServerTooOldError{
		{Version: "2.10.27"},
		{Version: "2.11.1", Bucket: "flow_state"},
	} {
		msg := err.Error()
		assert.ErrorIs(t, err, ErrServerTooOld)
		assert.NotContains(t, msg, "\n")
		assert.Contains(t, msg, err.Version)
		assert.Contains(t, msg, "needs nats-server 2.11 or newer")
		assert.Contains(t, msg, "Nats-Expected-Last-Subject-Sequence-Subject")
	}
}
