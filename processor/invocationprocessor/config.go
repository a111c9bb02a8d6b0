package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"go.opentelemetry.io/collector/component"
)

// Config is the configuration of the invocation processor. Defaults are set
// in createDefaultConfig; CONTRACT.md's processor table is the spec.
type Config struct {
	// OpenTimeout is the longest an invocation may stay open, counted from
	// the first arrival of any of its spans; after it the invocation is
	// summarised as incomplete with reason open_timeout. Default 4h; must be
	// positive.
	OpenTimeout time.Duration `mapstructure:"open_timeout"`

	// RemoteSettle is the quiet time required after the latest arrival in
	// each subtree of a span with invocation.remote = true before the
	// invocation can be final (CONTRACT.md, "Remote settle is per remote
	// subtree"). Default 2s; must be positive and below open_timeout.
	RemoteSettle time.Duration `mapstructure:"remote_settle"`

	// Retention is how long a closed invocation is remembered, after its
	// latest summary, to drop duplicate spans and revise the summary on
	// late spans. Default 15m; zero forgets an invocation as soon as it is
	// summarised (late spans then start a new, root-less invocation).
	Retention time.Duration `mapstructure:"retention"`

	// MaxOpenInvocations bounds the invocations held open, across all
	// shards; when one more opens, the oldest open invocation is summarised
	// incomplete with reason evicted. The same number bounds the closed
	// invocations kept in full for retention (the earliest closed is
	// forgotten, keeping only its fingerprint: MaxClosedInvocations).
	// Default 100000; must be positive.
	MaxOpenInvocations int `mapstructure:"max_open_invocations"`

	// MaxClosedInvocations bounds the closed invocation ids remembered
	// (as 64-bit fingerprints, about 24 bytes each) whose full record was
	// forgotten before their retention ended, so that a late or retried
	// span of one is passed on without opening a second invocation (and a
	// second revision 1). When one more is remembered, the oldest is
	// dropped. Independent of MaxOpenInvocations. Default 1000000; must be
	// positive.
	MaxClosedInvocations int `mapstructure:"max_closed_invocations"`

	// MaxSpansPerInvocation bounds the spans indexed per invocation; spans
	// beyond it still pass through but are not indexed, and the invocation
	// is summarised incomplete with reason span_limit. Default 100000; must
	// be positive.
	MaxSpansPerInvocation int `mapstructure:"max_spans_per_invocation"`

	// MaxInvocationIDBytes bounds the length of an invocation.id the
	// ledger indexes. A span whose id is longer passes through but is not
	// indexed and is counted (bound_hits, bound max_invocation_id_bytes):
	// its invocation gets no summary at all, so it is never reported
	// final. Default 256 (as for tenant names); must be positive.
	MaxInvocationIDBytes int `mapstructure:"max_invocation_id_bytes"`

	// MaxNameBytes bounds each name the ledger keeps of a span: its span
	// name, gen_ai.agent.name, gen_ai.conversation.id (the session),
	// invocation.unattributed and an unpriced model's name. A longer one is
	// cut at a UTF-8 boundary and ends with "…"; names label reasons,
	// anomalies and status views and prove nothing, so the accounting is
	// unchanged. Counted in bound_hits (bound max_name_bytes). Default 256;
	// must be at least 16.
	MaxNameBytes int `mapstructure:"max_name_bytes"`

	// MaxOpenBytes is an approximate budget, in bytes, for the state of
	// the open invocations across all shards (bytes.go says what is
	// counted). While it is exceeded the oldest open invocation of the
	// tenant holding the most is summarised incomplete with reason
	// evicted, as for max_open_invocations. The same budget bounds the
	// closed invocations kept in full for retention. Default 512 MiB; must
	// be positive.
	MaxOpenBytes int64 `mapstructure:"max_open_bytes"`

	// ShedHeapBytes makes the ledger give memory back under pressure:
	// while the Go heap's live objects exceed it (read every tick from
	// runtime/metrics, without data arriving), the processor forgets
	// closed invocations and evicts open ones, the tenant holding the
	// most bytes and its oldest first, each open one summarised
	// incomplete with reason evicted, then runs the garbage collector.
	// Set it a little below the memory_limiter's soft limit (limit_mib
	// minus spike_limit_mib) so the ledger sheds before the limiter
	// refuses data, and keeps shedding while it does. Default 0: never.
	// Must not be negative.
	ShedHeapBytes int64 `mapstructure:"shed_heap_bytes"`

	// EmitPending emits a pending summary (revision 0) for an invocation
	// whose root arrived while obligations are still open: the caller has
	// its result and work is still owed. Default true.
	EmitPending bool `mapstructure:"emit_pending"`

	// PendingDelay holds the pending summary back: it is emitted only if
	// the invocation is still open this long after its root arrived (by
	// the processor's clock), so an invocation whose spans merely arrive
	// out of order and close it a moment later gets no pending, only its
	// final. An invocation known to owe a background job's work (an ended
	// job's followups, a turn a wake announced) gets its pending at once
	// whatever the delay. Default 5s, the OpenTelemetry SDK batch span
	// processor's default schedule delay: a span that had ended when the
	// root ended reaches the collector within about that much after the
	// root. 0 emits every pending as soon as the root arrives (the
	// earlier default). Must not be negative and, with emit_pending,
	// must be below open_timeout; ignored with emit_pending: false.
	PendingDelay time.Duration `mapstructure:"pending_delay"`

	// UsageOperations lists the gen_ai.operation.name values whose spans
	// are model calls with summed usage. Default chat, text_completion,
	// generate_content, embeddings; must not be empty.
	UsageOperations []string `mapstructure:"usage_operations"`

	// Storage is the ID of a storage extension (for example file_storage)
	// that holds the ledger's state across restarts: every batch's facts
	// are written before ConsumeTraces returns, and Start loads them back.
	// Nil (the default) keeps the state in memory only, and Shutdown then
	// summarises every open invocation incomplete with reason shutdown.
	Storage *component.ID `mapstructure:"storage"`

	// Prices maps a model name (gen_ai.response.model, falling back to
	// gen_ai.request.model) to its price in USD per million tokens. Empty
	// (the default) means no invocation.cost attribute.
	Prices map[string]Price `mapstructure:"prices"`

	// Status names an invocation_status extension that the processor
	// publishes its open and recently closed invocations to, for the HTTP
	// API and page it serves. Default none: nothing is published.
	Status *component.ID `mapstructure:"status"`

	// StatusSpans bounds the spans of one invocation recorded for the
	// status extension's timeline page (only with status): the first this
	// many it indexes, and its root. Spans past it are counted and the
	// page says how many it does not draw; summaries count every span.
	// The records are part of an invocation's bytes (max_open_bytes).
	// Default 1000; 0 records none (the page then shows the summary
	// alone). Must not be negative.
	StatusSpans int `mapstructure:"status_spans"`

	// Tenant says where the tenant of a span comes from. With it, the
	// ledger keys invocations by (tenant, invocation.id), so tenants that
	// use the same invocation id never share an invocation, and summaries
	// carry invocation.tenant. Default none: one tenant, invocations keyed
	// by invocation.id alone.
	Tenant *TenantConfig `mapstructure:"tenant"`

	// Summaries says how this collector marks the summaries it emits and
	// whose summaries it lets through.
	Summaries SummariesConfig `mapstructure:"summaries"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// Tenant sources.
const (
	// TenantFromAuth reads the tenant from an auth attribute of the
	// authenticated client (client.Info), as set by the receiver's
	// authenticator (basicauth: username).
	TenantFromAuth = "auth"
	// TenantFromResource reads the tenant from a resource attribute, for
	// senders trusted to set it (a load-balancing tier that stamped it
	// from its own authenticator).
	TenantFromResource = "resource"
)

// TenantConfig says where a span's tenant comes from.
type TenantConfig struct {
	// Source is TenantFromAuth or TenantFromResource. No default: it must
	// be set.
	Source string `mapstructure:"source"`
	// Attribute is the auth attribute (Source auth; basicauth's is
	// username) or the resource attribute key (Source resource; the
	// load-balancing tier in collector-config stamps invocation.tenant)
	// that holds the tenant. No default: it must be set.
	Attribute string `mapstructure:"attribute"`

	// MaxOpenInvocations is the quota of open invocations of one tenant.
	// Past it the tenant's oldest open invocation is summarised
	// incomplete with reason evicted; another tenant's never is. Default
	// 0: a quarter of the processor's max_open_invocations. Must not be
	// negative nor exceed max_open_invocations.
	MaxOpenInvocations int `mapstructure:"max_open_invocations"`
	// MaxOpenBytes is the quota of one tenant's open state in bytes,
	// counted as max_open_bytes is, enforced the same way. Default 0: a
	// quarter of the processor's max_open_bytes. Must not be negative nor
	// exceed max_open_bytes.
	MaxOpenBytes int64 `mapstructure:"max_open_bytes"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// SummariesConfig marks the summaries the processor emits and names the
// collectors whose summaries it lets through.
type SummariesConfig struct {
	// Collector names this collector in the invocation.collector resource
	// attribute of every summary it emits. Default empty: the host name.
	Collector string `mapstructure:"collector"`
	// AcceptFrom lists collectors whose summaries pass through unchanged:
	// an incoming span named invocation.summary passes only when its scope
	// is this processor's and its invocation.collector is listed here; any
	// other is dropped and counted. Default empty: every incoming summary
	// is dropped. Only for a pipeline whose receiver nobody but those
	// collectors can reach: the marker says which collector made a
	// summary, it does not prove it.
	AcceptFrom []string `mapstructure:"accept_from"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// Price is the price of one model in USD per million tokens. Input is
// charged only for input tokens that are neither cache reads nor cache
// creations, because semconv input token counts include both.
type Price struct {
	// Input is the price of uncached input tokens. Zero means free.
	Input float64 `mapstructure:"input"`
	// Output is the price of output tokens (reasoning included). Zero
	// means free.
	Output float64 `mapstructure:"output"`
	// CacheRead is the price of input tokens read from the cache. Zero
	// means free.
	CacheRead float64 `mapstructure:"cache_read"`
	// CacheCreation is the price of input tokens written to the cache.
	// Zero means free.
	CacheCreation float64 `mapstructure:"cache_creation"`
}

var _ component.Config = (*Config)(nil)

// Validate checks the configuration; each error names its YAML key.
func (cfg *Config) Validate() error {
	var errs []error
	if cfg.OpenTimeout <= 0 {
		errs = append(errs, errors.New("open_timeout must be positive"))
	}
	if cfg.RemoteSettle <= 0 {
		errs = append(errs, errors.New("remote_settle must be positive"))
	} else if cfg.OpenTimeout > 0 && cfg.RemoteSettle >= cfg.OpenTimeout {
		errs = append(errs, errors.New("remote_settle must be less than open_timeout"))
	}
	if cfg.PendingDelay < 0 {
		errs = append(errs, errors.New("pending_delay must not be negative"))
	} else if cfg.EmitPending && cfg.OpenTimeout > 0 && cfg.PendingDelay >= cfg.OpenTimeout {
		// A pending could never precede the open_timeout summary. The
		// default delay meets a short open_timeout here too: the error
		// says how to choose.
		errs = append(errs, fmt.Errorf("pending_delay (%v, default %v) must be less than open_timeout (%v): set pending_delay below it (0s emits each pending at once) or emit_pending: false",
			cfg.PendingDelay, defaultPendingDelay, cfg.OpenTimeout))
	}
	if cfg.Retention < 0 {
		errs = append(errs, errors.New("retention must not be negative"))
	}
	if cfg.MaxOpenInvocations <= 0 {
		errs = append(errs, errors.New("max_open_invocations must be positive"))
	}
	if cfg.MaxClosedInvocations <= 0 {
		errs = append(errs, errors.New("max_closed_invocations must be positive"))
	}
	if cfg.MaxSpansPerInvocation <= 0 {
		errs = append(errs, errors.New("max_spans_per_invocation must be positive"))
	}
	if cfg.MaxInvocationIDBytes <= 0 {
		errs = append(errs, errors.New("max_invocation_id_bytes must be positive"))
	}
	if cfg.MaxNameBytes < minNameBytes {
		errs = append(errs, fmt.Errorf("max_name_bytes must be at least %d", minNameBytes))
	}
	if cfg.MaxOpenBytes <= 0 {
		errs = append(errs, errors.New("max_open_bytes must be positive"))
	}
	if cfg.ShedHeapBytes < 0 {
		errs = append(errs, errors.New("shed_heap_bytes must not be negative (0 never sheds)"))
	}
	if len(cfg.UsageOperations) == 0 {
		errs = append(errs, errors.New("usage_operations must not be empty"))
	}
	for i, op := range cfg.UsageOperations {
		if op == "" {
			errs = append(errs, fmt.Errorf("usage_operations[%d] must not be empty", i))
		}
	}
	if cfg.StatusSpans < 0 {
		errs = append(errs, errors.New("status_spans must not be negative (0 records no spans for the timeline page)"))
	}
	if cfg.Storage != nil && cfg.Storage.Type().String() == "" {
		errs = append(errs, errors.New("storage must name a storage extension"))
	}
	errs = append(errs, cfg.Tenant.validate(cfg), cfg.Summaries.validate())
	models := make([]string, 0, len(cfg.Prices))
	for m := range cfg.Prices {
		models = append(models, m)
	}
	sort.Strings(models)
	for _, m := range models {
		if m == "" {
			errs = append(errs, errors.New("prices: model name must not be empty"))
		}
		p := cfg.Prices[m]
		for _, f := range []struct {
			key string
			v   float64
		}{{"input", p.Input}, {"output", p.Output}, {"cache_read", p.CacheRead}, {"cache_creation", p.CacheCreation}} {
			if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
				errs = append(errs, fmt.Errorf("prices::%s::%s must be a non-negative number", m, f.key))
			}
		}
	}
	return errors.Join(errs...)
}
