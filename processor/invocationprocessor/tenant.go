package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/pdata/pcommon"
)

// maxTenantLen bounds a tenant name: it is part of every ledger key of the
// tenant and a label of every metric made from its summaries.
const maxTenantLen = 256

func (t *TenantConfig) validate(cfg *Config) error {
	if t == nil {
		return nil
	}
	var errs []error
	switch {
	case t.MaxOpenInvocations < 0:
		errs = append(errs, errors.New("tenant::max_open_invocations must not be negative (0: a quarter of max_open_invocations)"))
	case cfg.MaxOpenInvocations > 0 && t.MaxOpenInvocations > cfg.MaxOpenInvocations:
		errs = append(errs, fmt.Errorf("tenant::max_open_invocations (%d) must not exceed max_open_invocations (%d): "+
			"lower tenant::max_open_invocations, or leave it unset (0) for a quarter of max_open_invocations", t.MaxOpenInvocations, cfg.MaxOpenInvocations))
	}
	switch {
	case t.MaxOpenBytes < 0:
		errs = append(errs, errors.New("tenant::max_open_bytes must not be negative (0: a quarter of max_open_bytes)"))
	case cfg.MaxOpenBytes > 0 && t.MaxOpenBytes > cfg.MaxOpenBytes:
		errs = append(errs, fmt.Errorf("tenant::max_open_bytes (%d) must not exceed max_open_bytes (%d): "+
			"lower tenant::max_open_bytes, or leave it unset (0) for a quarter of max_open_bytes", t.MaxOpenBytes, cfg.MaxOpenBytes))
	}
	switch t.Source {
	case TenantFromAuth, TenantFromResource:
	case "":
		errs = append(errs, fmt.Errorf("tenant::source must be set (%s or %s)", TenantFromAuth, TenantFromResource))
	default:
		errs = append(errs, fmt.Errorf("tenant::source %q must be %s or %s", t.Source, TenantFromAuth, TenantFromResource))
	}
	if t.Attribute == "" {
		errs = append(errs, errors.New("tenant::attribute must not be empty"))
	}
	return errors.Join(errs...)
}

// tenants reads the tenant of incoming spans as the tenant setting says.
// The zero value (no setting) gives every span the empty tenant.
type tenants struct {
	source    string // TenantFromAuth, TenantFromResource, or "" for none
	attribute string
}

func newTenants(cfg *TenantConfig) tenants {
	if cfg == nil {
		return tenants{}
	}
	return tenants{source: cfg.Source, attribute: cfg.Attribute}
}

// requestTenant is the tenant of one ConsumeTraces call's client (source
// auth), read once per request.
type requestTenant struct {
	name string
	ok   bool
}

// ofRequest reads the authenticated client's tenant from ctx when the
// source is auth. Without an authenticator on the receiver, or when the
// authenticator sets no such attribute, the request has no tenant.
func (t tenants) ofRequest(ctx context.Context) requestTenant {
	if t.source != TenantFromAuth {
		return requestTenant{}
	}
	auth := client.FromContext(ctx).Auth
	if auth == nil {
		return requestTenant{}
	}
	name, _ := auth.GetAttribute(t.attribute).(string)
	return requestTenant{name: name, ok: validName(name)}
}

// of returns the tenant of the spans under res: none (and ok) without the
// tenant setting, the request's with source auth, the resource
// attribute's with source resource. ok is false when the setting is on and
// no valid tenant is found: such spans are not indexed.
func (t tenants) of(req requestTenant, res pcommon.Resource) (string, bool) {
	switch t.source {
	case "":
		return "", true
	case TenantFromAuth:
		return req.name, req.ok
	default:
		v, ok := res.Attributes().Get(t.attribute)
		if !ok || v.Type() != pcommon.ValueTypeStr || !validName(v.Str()) {
			return "", false
		}
		return v.Str(), true
	}
}

// validTenant reports whether s can name a tenant: not empty, bounded,
// valid UTF-8 (it becomes a span attribute and a metric label), and free
// of NUL (which separates it from the invocation id in a ledger key).
func validName(s string) bool {
	return s != "" && len(s) <= maxTenantLen && utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// ledgerKey is what the ledger keys an invocation by: its id alone when it
// has no tenant, else the tenant and the id joined by NUL. A tenant never
// holds NUL, and an id that does is joined to the empty tenant, so two
// different (tenant, id) pairs never share a key and summary.SplitKey gives
// the pair back. Storage keeps invocations by this key, so the tenant is
// part of what it stores.
func ledgerKey(tenant, id string) string {
	if tenant == "" && strings.IndexByte(id, 0) < 0 {
		return id
	}
	return tenant + "\x00" + id
}
