package invocationstatusextension // import "github.com/agentledger/agentledger/extension/invocationstatusextension"

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/confighttp"
	"go.opentelemetry.io/collector/extension"

	"github.com/agentledger/agentledger/extension/invocationstatusextension/internal/metadata"
)

const (
	defaultEndpoint    = "127.0.0.1:55690"
	defaultMaxClosed   = 1000
	defaultMaxClosedMB = 64
	defaultPageRefresh = 2 * time.Second
	defaultPageRows    = 200
	// defaultMaxWatchWait and defaultWriteTimeout: a watch may wait a
	// minute, and its answer is written within the server's write
	// timeout, which confighttp sets to 30s by default.
	defaultMaxWatchWait      = time.Minute
	defaultWriteTimeout      = 90 * time.Second
	defaultMaxSessionWatches = 1000
)

// NewFactory returns a factory for the invocation_status extension.
func NewFactory() extension.Factory {
	return extension.NewFactory(
		metadata.Type,
		createDefaultConfig,
		createExtension,
		metadata.ExtensionStability,
	)
}

func createDefaultConfig() component.Config {
	server := confighttp.NewDefaultServerConfig()
	server.NetAddr.Endpoint = defaultEndpoint
	server.WriteTimeout = defaultWriteTimeout
	return &Config{
		ServerConfig:      server,
		MaxClosed:         defaultMaxClosed,
		MaxClosedBytes:    defaultMaxClosedMB << 20,
		PageRefresh:       defaultPageRefresh,
		PageRows:          defaultPageRows,
		MaxWatchWait:      defaultMaxWatchWait,
		MaxSessionWatches: defaultMaxSessionWatches,
	}
}

func createExtension(_ context.Context, set extension.Settings, cfg component.Config) (extension.Extension, error) {
	return newExtension(cfg.(*Config), set.TelemetrySettings, time.Now)
}
