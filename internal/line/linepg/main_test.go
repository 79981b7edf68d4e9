package linepg_test

import (
	"testing"

	"github.com/stocksvc/stocksvc/internal/testenv"
)

// TestMain is testenv's: integration tests that skip for want of servers fail the package
// unless the skips are accepted, and no goroutine may outlive the tests.
func TestMain(m *testing.M) { testenv.Main(m) }
