package wait

import (
	"sync/atomic"
	"testing"
)

func TestForPollsUntilTheConditionHolds(t *testing.T) {
	var looks atomic.Int32
	For(t, "the third look", func() bool { return looks.Add(1) == 3 })
	if n := looks.Load(); n != 3 {
		t.Errorf("looked %d times, want 3", n)
	}
}
