//go:generate go -C ../../tools/mdatagen tool mdatagen ../../processor/invocationprocessor/metadata.yaml

package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"context"
	"slices"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/processor"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/metadata"
)

const (
	defaultOpenTimeout           = 4 * time.Hour
	defaultRemoteSettle          = 2 * time.Second
	defaultRetention             = 15 * time.Minute
	defaultMaxOpenInvocations    = 100000
	defaultMaxClosedInvocations  = 1000000
	defaultMaxSpansPerInvocation = 100000
	defaultMaxInvocationIDBytes  = 256
	defaultMaxNameBytes          = 256
	defaultMaxOpenBytes          = 512 << 20
	defaultStatusSpans           = 1000
	// defaultPendingDelay is the OpenTelemetry SDK batch span processor's
	// default schedule delay (OTEL_BSP_SCHEDULE_DELAY, 5000 ms): see
	// Config.PendingDelay.
	defaultPendingDelay = 5 * time.Second
)

// NewFactory returns a factory for the invocation processor.
func NewFactory() processor.Factory {
	return processor.NewFactory(
		metadata.Type,
		createDefaultConfig,
		processor.WithTraces(createTraces, metadata.TracesStability),
	)
}

func createDefaultConfig() component.Config {
	return &Config{
		OpenTimeout:           defaultOpenTimeout,
		RemoteSettle:          defaultRemoteSettle,
		Retention:             defaultRetention,
		MaxOpenInvocations:    defaultMaxOpenInvocations,
		MaxClosedInvocations:  defaultMaxClosedInvocations,
		MaxSpansPerInvocation: defaultMaxSpansPerInvocation,
		MaxInvocationIDBytes:  defaultMaxInvocationIDBytes,
		MaxNameBytes:          defaultMaxNameBytes,
		MaxOpenBytes:          defaultMaxOpenBytes,
		StatusSpans:           defaultStatusSpans,
		EmitPending:           true,
		PendingDelay:          defaultPendingDelay,
		UsageOperations:       slices.Clone(contract.DefaultUsageOperations),
	}
}

func createTraces(
	_ context.Context,
	set processor.Settings,
	cfg component.Config,
	next consumer.Traces,
) (processor.Traces, error) {
	return newProcessor(set, cfg.(*Config), next, systemClock{}, 0)
}
