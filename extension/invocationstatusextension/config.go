package invocationstatusextension // import "github.com/agentledger/agentledger/extension/invocationstatusextension"

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/confighttp"
)

// maxPageSize is the largest page the API and the page's tables serve.
const maxPageSize = 1000

// Config is the configuration of the invocation_status extension. Defaults
// are set in createDefaultConfig.
type Config struct {
	// ServerConfig is the HTTP server: endpoint (default 127.0.0.1:55690,
	// loopback only), tls, auth (an authenticator extension such as
	// bearertokenauth), cors and the other confighttp server settings. A
	// named field, not an embedded one: ServerConfig's own Unmarshal would
	// otherwise be promoted and decode only its fields.
	ServerConfig confighttp.ServerConfig `mapstructure:",squash"`

	// JaegerURL is the base URL of a Jaeger UI (for example
	// http://127.0.0.1:16686); when set, every invocation on the page links
	// to its traces there. Default empty: no links.
	JaegerURL string `mapstructure:"jaeger_url"`

	// MaxClosed is how many recently closed invocations (final or
	// incomplete) are kept for the API and the page, the most recently
	// closed first to stay. Default 1000; must be positive. Open
	// invocations are all kept: the processor's max_open_invocations
	// bounds them.
	MaxClosed int `mapstructure:"max_closed"`

	// MaxClosedBytes bounds the closed views kept, in bytes (an estimate
	// of each view's strings and lists): past it the earliest closed are
	// dropped, as past max_closed. Default 64 MiB; must be positive.
	MaxClosedBytes int64 `mapstructure:"max_closed_bytes"`

	// AllowedHosts lists the host names, besides localhost and the
	// endpoint's host, that a request's Host header may name (IP
	// addresses are always accepted). Any other gets 421 Misdirected
	// Request, so that a web page cannot read the API through a name of
	// its own that resolves to this machine (DNS rebinding). "*" accepts
	// every host. Default none.
	AllowedHosts []string `mapstructure:"allowed_hosts"`

	// Tenant scopes the API and the page to the caller's tenant (it needs
	// auth). Default none: every caller sees every tenant.
	Tenant *TenantScopeConfig `mapstructure:"tenant"`

	// PageRefresh is how often the page reloads its tables. Default 2s;
	// must be at least 100ms.
	PageRefresh time.Duration `mapstructure:"page_refresh"`

	// PageRows bounds the rows of each of the page's two tables (open,
	// recently closed). Default 200; must be between 1 and 1000.
	PageRows int `mapstructure:"page_rows"`

	// MaxWatchWait is the longest wait a session watch (GET
	// /v1/sessions/{session}?wait=...) may ask for; a longer one is
	// refused (400). Default 60s; must be positive and, when the server's
	// write_timeout is set, shorter than it (the answer of a watch is
	// written at the wait's end).
	MaxWatchWait time.Duration `mapstructure:"max_watch_wait"`

	// MaxSessionWatches bounds the session watches waiting at once, over
	// all sessions; one more is refused (503) until one returns. Default
	// 1000; must be positive.
	MaxSessionWatches int `mapstructure:"max_session_watches"`

	// prevent unkeyed literal initialization
	_ struct{}
}

var _ component.Config = (*Config)(nil)

// Validate checks the configuration; each error names its YAML key.
func (cfg *Config) Validate() error {
	var errs []error
	if cfg.ServerConfig.NetAddr.Endpoint == "" {
		errs = append(errs, errors.New("endpoint must not be empty"))
	}
	if cfg.JaegerURL != "" {
		u, err := url.Parse(cfg.JaegerURL)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("jaeger_url: %w", err))
		case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
			errs = append(errs, fmt.Errorf("jaeger_url must be an absolute http or https URL, got %q", cfg.JaegerURL))
		}
	}
	if cfg.MaxClosed <= 0 {
		errs = append(errs, errors.New("max_closed must be positive"))
	}
	if cfg.MaxClosedBytes <= 0 {
		errs = append(errs, errors.New("max_closed_bytes must be positive"))
	}
	for i, h := range cfg.AllowedHosts {
		if h == "" || strings.ContainsAny(h, "/:@ ") && !strings.HasPrefix(h, "[") {
			errs = append(errs, fmt.Errorf("allowed_hosts[%d] must be a host name without scheme, port or path, got %q", i, h))
		}
	}
	errs = append(errs, cfg.Tenant.validate(cfg))
	if cfg.PageRefresh < 100*time.Millisecond {
		errs = append(errs, errors.New("page_refresh must be at least 100ms"))
	}
	if cfg.PageRows < 1 || cfg.PageRows > maxPageSize {
		errs = append(errs, fmt.Errorf("page_rows must be between 1 and %d", maxPageSize))
	}
	if cfg.MaxWatchWait <= 0 {
		errs = append(errs, errors.New("max_watch_wait must be positive"))
	} else if wt := cfg.ServerConfig.WriteTimeout; wt > 0 && cfg.MaxWatchWait >= wt {
		errs = append(errs, fmt.Errorf("max_watch_wait (%s) must be shorter than write_timeout (%s): a watch answers at the end of its wait", cfg.MaxWatchWait, wt))
	}
	if cfg.MaxSessionWatches <= 0 {
		errs = append(errs, errors.New("max_session_watches must be positive"))
	}
	return errors.Join(errs...)
}
