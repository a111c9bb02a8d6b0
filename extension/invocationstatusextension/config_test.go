package invocationstatusextension

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/agentledger/agentledger/extension/invocationstatusextension/internal/metadata"
)

func TestLoadConfig(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	require.NoError(t, err)
	load := func(t *testing.T, name string) *Config {
		t.Helper()
		cfg := NewFactory().CreateDefaultConfig().(*Config)
		sub, err := cm.Sub(component.NewIDWithName(metadata.Type, name).String())
		require.NoError(t, err)
		require.NoError(t, sub.Unmarshal(cfg))
		return cfg
	}

	def := load(t, "")
	assert.Equal(t, "127.0.0.1:55690", def.ServerConfig.NetAddr.Endpoint, "loopback by default")
	assert.False(t, def.ServerConfig.TLS.HasValue())
	assert.False(t, def.ServerConfig.Auth.HasValue())
	assert.Equal(t, 1000, def.MaxClosed)
	assert.Equal(t, 2*time.Second, def.PageRefresh)
	assert.Equal(t, 200, def.PageRows)
	assert.Empty(t, def.JaegerURL)
	assert.Equal(t, time.Minute, def.MaxWatchWait)
	assert.Equal(t, 1000, def.MaxSessionWatches)
	assert.Equal(t, 90*time.Second, def.ServerConfig.WriteTimeout, "longer than a watch's longest wait")
	require.NoError(t, confmap.Validate(def))

	custom := load(t, "custom")
	require.NoError(t, confmap.Validate(custom))
	assert.Equal(t, "127.0.0.1:0", custom.ServerConfig.NetAddr.Endpoint)
	assert.Equal(t, "http://127.0.0.1:16686", custom.JaegerURL)
	assert.Equal(t, 50, custom.MaxClosed)
	assert.Equal(t, 5*time.Second, custom.PageRefresh)
	assert.Equal(t, 20, custom.PageRows)
	require.True(t, custom.ServerConfig.Auth.HasValue())
	assert.Equal(t, component.MustNewID("bearertokenauth"), custom.ServerConfig.Auth.Get().Config.AuthenticatorID)
	require.True(t, custom.ServerConfig.TLS.HasValue())
	assert.Equal(t, "server.crt", custom.ServerConfig.TLS.Get().CertFile)
}

func TestValidateNamesKeys(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	require.NoError(t, err)
	for _, tt := range []struct {
		name string
		errs []string
	}{
		{"no_endpoint", []string{"endpoint must not be empty"}},
		{"bad_jaeger", []string{"jaeger_url"}},
		{"bounds", []string{"max_closed must be positive", "page_refresh must be at least 100ms", "page_rows must be between 1 and 1000",
			"max_watch_wait must be positive", "max_session_watches must be positive"}},
		{"watch_past_write_timeout", []string{"max_watch_wait (1m0s) must be shorter than write_timeout (30s)"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := NewFactory().CreateDefaultConfig().(*Config)
			sub, err := cm.Sub(component.NewIDWithName(metadata.Type, tt.name).String())
			require.NoError(t, err)
			require.NoError(t, sub.Unmarshal(cfg))
			err = confmap.Validate(cfg)
			for _, want := range tt.errs {
				assert.ErrorContains(t, err, want)
			}
		})
	}
}
