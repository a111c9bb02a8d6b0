package scriptedmodel_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that closed servers leave no goroutine behind. Idle
// keep-alive connections of the SDK clients' shared transport are not the
// server's and are ignored.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}
