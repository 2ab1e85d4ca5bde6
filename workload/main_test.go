package workload

import (
	"testing"

	"go.uber.org/goleak"
)

// The package starts no goroutines; the concurrency tests' own must end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
