package invocationprocessor

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/metadata"
)

func TestLoadConfig(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	require.NoError(t, err)

	tests := []struct {
		id      component.ID
		want    *Config
		loadErr string
		valErr  string
	}{
		{id: component.NewID(metadata.Type), want: createDefaultConfig().(*Config)},
		{
			id: component.NewIDWithName(metadata.Type, "custom"),
			want: &Config{
				OpenTimeout:           time.Hour,
				RemoteSettle:          5 * time.Second,
				Retention:             30 * time.Minute,
				MaxOpenInvocations:    1000,
				MaxClosedInvocations:  20000,
				MaxSpansPerInvocation: 500,
				MaxInvocationIDBytes:  64,
				MaxNameBytes:          100,
				MaxOpenBytes:          1 << 20,
				ShedHeapBytes:         256 << 20,
				EmitPending:           false,
				PendingDelay:          5 * time.Second, // ignored without emit_pending
				StatusSpans:           50,
				UsageOperations:       []string{"chat", "responses"},
				Prices: map[string]Price{
					"claude-sonnet-4": {Input: 3, Output: 15, CacheRead: 0.3, CacheCreation: 3.75},
				},
			},
		},
		{
			id: component.NewIDWithName(metadata.Type, "storage"),
			want: func() *Config {
				cfg := createDefaultConfig().(*Config)
				id := component.MustNewIDWithName("file_storage", "ledger")
				cfg.Storage = &id
				return cfg
			}(),
		},
		{
			id: component.NewIDWithName(metadata.Type, "tenants"),
			want: func() *Config {
				cfg := createDefaultConfig().(*Config)
				cfg.Tenant = &TenantConfig{Source: TenantFromAuth, Attribute: "username"}
				cfg.Summaries = SummariesConfig{Collector: "backend-1", AcceptFrom: []string{"upstream-a", "upstream-b"}}
				return cfg
			}(),
		},
		{
			id: component.NewIDWithName(metadata.Type, "pendingdelay"),
			want: func() *Config {
				cfg := createDefaultConfig().(*Config)
				cfg.PendingDelay = 1500 * time.Millisecond
				return cfg
			}(),
		},
		{
			id: component.NewIDWithName(metadata.Type, "quotas"),
			want: func() *Config {
				cfg := createDefaultConfig().(*Config)
				cfg.MaxOpenInvocations = 1000
				cfg.MaxOpenBytes = 4000000
				cfg.Tenant = &TenantConfig{Source: TenantFromAuth, Attribute: "username", MaxOpenInvocations: 100, MaxOpenBytes: 400000}
				return cfg
			}(),
		},
		{
			id: component.NewIDWithName(metadata.Type, "badquotas"),
			valErr: "max_invocation_id_bytes must be positive\n" +
				"max_name_bytes must be at least 16\n" +
				"max_open_bytes must be positive\n" +
				"shed_heap_bytes must not be negative (0 never sheds)\n" +
				"tenant::max_open_invocations (1001) must not exceed max_open_invocations (1000): " +
				"lower tenant::max_open_invocations, or leave it unset (0) for a quarter of max_open_invocations\n" +
				"tenant::max_open_bytes must not be negative (0: a quarter of max_open_bytes)",
		},
		{id: component.NewIDWithName(metadata.Type, "badpendingdelay"), valErr: "pending_delay (1m0s, default 5s) must be less than open_timeout (1m0s)"},
		// A short open_timeout meets the default pending_delay: the error
		// says what to set; either setting makes the configuration valid.
		{id: component.NewIDWithName(metadata.Type, "shortopentimeout"),
			valErr: "pending_delay (5s, default 5s) must be less than open_timeout (3s): set pending_delay below it (0s emits each pending at once) or emit_pending: false"},
		{
			id: component.NewIDWithName(metadata.Type, "shortopentimeout_atonce"),
			want: func() *Config {
				cfg := createDefaultConfig().(*Config)
				cfg.OpenTimeout = 3 * time.Second
				cfg.RemoteSettle = time.Second
				cfg.PendingDelay = 0
				return cfg
			}(),
		},
		{
			id: component.NewIDWithName(metadata.Type, "shortopentimeout_nopending"),
			want: func() *Config {
				cfg := createDefaultConfig().(*Config)
				cfg.OpenTimeout = 3 * time.Second
				cfg.RemoteSettle = time.Second
				cfg.EmitPending = false
				return cfg
			}(),
		},
		{id: component.NewIDWithName(metadata.Type, "badtenant"), valErr: `tenant::source "header" must be auth or resource`},
		{id: component.NewIDWithName(metadata.Type, "badstorage"), loadErr: "storage"},
		{id: component.NewIDWithName(metadata.Type, "invalid"), valErr: "remote_settle must be less than open_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.id.String(), func(t *testing.T) {
			cfg := NewFactory().CreateDefaultConfig()
			sub, err := cm.Sub(tt.id.String())
			require.NoError(t, err)
			err = sub.Unmarshal(cfg)
			if tt.loadErr != "" {
				require.ErrorContains(t, err, tt.loadErr)
				return
			}
			require.NoError(t, err)
			if tt.valErr != "" {
				require.ErrorContains(t, confmap.Validate(cfg), tt.valErr)
				return
			}
			require.NoError(t, confmap.Validate(cfg))
			assert.Equal(t, tt.want, cfg)
		})
	}
}

func TestDefaultConfig(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	assert.Equal(t, 4*time.Hour, cfg.OpenTimeout)
	assert.Equal(t, 2*time.Second, cfg.RemoteSettle)
	assert.Equal(t, 15*time.Minute, cfg.Retention)
	assert.Equal(t, 100000, cfg.MaxOpenInvocations)
	assert.Equal(t, 1000000, cfg.MaxClosedInvocations)
	assert.Equal(t, 100000, cfg.MaxSpansPerInvocation)
	assert.True(t, cfg.EmitPending)
	assert.Equal(t, 5*time.Second, cfg.PendingDelay)
	assert.Equal(t, []string{"chat", "text_completion", "generate_content", "embeddings"}, cfg.UsageOperations)
	assert.Empty(t, cfg.Prices)
	assert.Equal(t, 1000, cfg.StatusSpans)
	require.NoError(t, cfg.Validate())
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"zero open_timeout", func(c *Config) { c.OpenTimeout = 0 }, "open_timeout must be positive"},
		{"negative open_timeout", func(c *Config) { c.OpenTimeout = -time.Second }, "open_timeout must be positive"},
		{"zero remote_settle", func(c *Config) { c.RemoteSettle = 0 }, "remote_settle must be positive"},
		{"remote_settle not below open_timeout", func(c *Config) { c.RemoteSettle = c.OpenTimeout }, "remote_settle must be less than open_timeout"},
		{"negative retention", func(c *Config) { c.Retention = -1 }, "retention must not be negative"},
		{"zero max_open_invocations", func(c *Config) { c.MaxOpenInvocations = 0 }, "max_open_invocations must be positive"},
		{"zero max_closed_invocations", func(c *Config) { c.MaxClosedInvocations = 0 }, "max_closed_invocations must be positive"},
		{"negative max_closed_invocations", func(c *Config) { c.MaxClosedInvocations = -1 }, "max_closed_invocations must be positive"},
		{"negative max_spans_per_invocation", func(c *Config) { c.MaxSpansPerInvocation = -5 }, "max_spans_per_invocation must be positive"},
		{"empty usage_operations", func(c *Config) { c.UsageOperations = nil }, "usage_operations must not be empty"},
		{"empty usage operation name", func(c *Config) { c.UsageOperations = []string{"chat", ""} }, "usage_operations[1] must not be empty"},
		{"negative input price", func(c *Config) { c.Prices = map[string]Price{"m": {Input: -1}} }, "prices::m::input must be a non-negative number"},
		{"negative output price", func(c *Config) { c.Prices = map[string]Price{"m": {Output: -1}} }, "prices::m::output"},
		{"negative cache_read price", func(c *Config) { c.Prices = map[string]Price{"m": {CacheRead: -0.1}} }, "prices::m::cache_read"},
		{"negative cache_creation price", func(c *Config) { c.Prices = map[string]Price{"m": {CacheCreation: -2}} }, "prices::m::cache_creation"},
		{"negative pending_delay", func(c *Config) { c.PendingDelay = -time.Millisecond }, "pending_delay must not be negative"},
		{"pending_delay not below open_timeout", func(c *Config) { c.PendingDelay = c.OpenTimeout }, "pending_delay (4h0m0s, default 5s) must be less than open_timeout (4h0m0s)"},
		{"default pending_delay, open_timeout below it", func(c *Config) { c.OpenTimeout, c.RemoteSettle = 5*time.Second, time.Second }, "pending_delay (5s, default 5s) must be less than open_timeout (5s)"},
		{"empty model name", func(c *Config) { c.Prices = map[string]Price{"": {}} }, "prices: model name must not be empty"},
		{"negative status_spans", func(c *Config) { c.StatusSpans = -1 }, "status_spans must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := createDefaultConfig().(*Config)
			tt.mod(cfg)
			require.ErrorContains(t, cfg.Validate(), tt.want)
		})
	}
}

// pending_delay is checked against open_timeout only where it can matter:
// with emit_pending: false it is ignored, and 0 is valid with any
// open_timeout.
func TestValidatePendingDelayAccepted(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"emit_pending false, default delay, short open_timeout": func(c *Config) {
			c.EmitPending, c.OpenTimeout, c.RemoteSettle = false, time.Second, time.Millisecond
		},
		"emit_pending false, any delay": func(c *Config) { c.EmitPending, c.PendingDelay = false, 10*time.Hour },
		"0s, short open_timeout": func(c *Config) {
			c.PendingDelay, c.OpenTimeout, c.RemoteSettle = 0, 2*time.Millisecond, time.Millisecond
		},
		"just below open_timeout": func(c *Config) { c.PendingDelay = c.OpenTimeout - 1 },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := createDefaultConfig().(*Config)
			mod(cfg)
			require.NoError(t, cfg.Validate())
		})
	}
}

func TestCreateRejectsInvalidConfig(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	cfg.MaxOpenInvocations = 0
	_, err := newProcessor(settingsForTest(), cfg, nil, systemClock{}, 0)
	require.ErrorContains(t, err, "max_open_invocations")
}

// TestSharedConfigTakesASingleSetOfABound is issue 34's fourth
// observation: collector-config/shared.yaml with only
// --set processors::invocation::max_open_invocations=40 (or max_open_bytes)
// must start. Its tenant quotas are not fixed numbers: they are derived at
// start as a quarter of the global bounds, whatever those are set to.
func TestSharedConfigTakesASingleSetOfABound(t *testing.T) {
	shared, err := confmaptest.LoadConf(filepath.Join("..", "..", "collector-config", "shared.yaml"))
	require.NoError(t, err)
	for _, set := range []map[string]any{
		{},
		{"max_open_invocations": 40},
		{"max_open_invocations": 1},
		{"max_open_bytes": 1 << 20},
		{"max_open_invocations": 40, "max_open_bytes": 1 << 20},
	} {
		t.Run(fmt.Sprint(set), func(t *testing.T) {
			sub, err := shared.Sub("processors::invocation")
			require.NoError(t, err)
			// The shipped file reads shed_heap_bytes from the environment.
			require.NoError(t, sub.Merge(confmap.NewFromStringMap(map[string]any{"shed_heap_bytes": 671088640})))
			require.NoError(t, sub.Merge(confmap.NewFromStringMap(set)))
			cfg := NewFactory().CreateDefaultConfig().(*Config)
			require.NoError(t, sub.Unmarshal(cfg))
			require.NoError(t, confmap.Validate(cfg))
			require.NotNil(t, cfg.Tenant)
			assert.Zero(t, cfg.Tenant.MaxOpenInvocations, "not a fixed number in the shipped config")
			assert.Zero(t, cfg.Tenant.MaxOpenBytes, "not a fixed number in the shipped config")
			b := newBounds(cfg)
			assert.Equal(t, max(1, int64(cfg.MaxOpenInvocations)/4), b.tenantLimit)
			assert.Equal(t, max(1, cfg.MaxOpenBytes/4), b.tenantByteLimit)
		})
	}
}

// A tenant quota set above its global bound fails naming both keys and
// the fix.
func TestTenantQuotaAboveGlobalNamesBothKeys(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	cfg.MaxOpenInvocations, cfg.MaxOpenBytes = 40, 1000
	cfg.Tenant = &TenantConfig{Source: TenantFromAuth, Attribute: "username", MaxOpenInvocations: 25000, MaxOpenBytes: 67108864}
	err := cfg.Validate()
	require.Error(t, err)
	for _, want := range []string{
		"tenant::max_open_invocations (25000) must not exceed max_open_invocations (40): lower tenant::max_open_invocations, or leave it unset (0) for a quarter of max_open_invocations",
		"tenant::max_open_bytes (67108864) must not exceed max_open_bytes (1000): lower tenant::max_open_bytes, or leave it unset (0) for a quarter of max_open_bytes",
	} {
		assert.ErrorContains(t, err, want)
	}
}
