package wait

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestWithinReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	ok := Within(time.Minute, time.Millisecond, func() (bool, string) {
		calls++
		return calls == 3, fmt.Sprintf("call %d", calls)
	}, func(reason string) { t.Errorf("failed: %s", reason) })
	assert.True(t, ok)
	assert.Equal(t, 3, calls)
}

func TestWithinFailsWithTheLastReasonAtTheBound(t *testing.T) {
	calls := 0
	var failed string
	ok := Within(5*time.Millisecond, time.Millisecond, func() (bool, string) {
		calls++
		return false, fmt.Sprintf("call %d", calls)
	}, func(reason string) { failed = reason })
	assert.False(t, ok)
	assert.Equal(t, fmt.Sprintf("call %d", calls), failed, "the reason of the last check")
}

func TestUntilChecksAtLeastOnce(t *testing.T) {
	calls := 0
	Until(t, 0, time.Millisecond, func() (bool, string) {
		calls++
		return true, ""
	})
	assert.Equal(t, 1, calls)
}
