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
	return &Config{
		ServerConfig:   server,
		MaxClosed:      defaultMaxClosed,
		MaxClosedBytes: defaultMaxClosedMB << 20,
		PageRefresh:    defaultPageRefresh,
		PageRows:       defaultPageRows,
	}
}

func createExtension(_ context.Context, set extension.Settings, cfg component.Config) (extension.Extension, error) {
	return newExtension(cfg.(*Config), set.TelemetrySettings, time.Now)
}
