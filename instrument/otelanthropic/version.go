package otelanthropic

// ScopeName is the instrumentation scope name of the spans and metrics of
// this package: its import path.
const ScopeName = "github.com/agentledger/agentledger/instrument/otelanthropic"

// Version returns the version of this instrumentation.
func Version() string {
	return "0.1.0"
}
