package gpu

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine the collector starts (cycles, the XID event loop, CPU
// burner waiters) must be gone when its test ends.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
