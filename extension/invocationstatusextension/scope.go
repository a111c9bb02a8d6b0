package invocationstatusextension // import "github.com/agentledger/agentledger/extension/invocationstatusextension"

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"go.opentelemetry.io/collector/client"
)

// TenantScopeConfig scopes the API to the caller's tenant: the
// authenticator on the endpoint (auth) names the caller, and a caller
// sees only the invocations and sessions of the tenant of that name,
// the same name the processor's tenant setting (source auth) gives the
// spans it sent.
type TenantScopeConfig struct {
	// Attribute is the auth attribute of the authenticated caller that
	// names its tenant (basicauth: username), as in the processor's
	// tenant::attribute. No default: it must be set.
	Attribute string `mapstructure:"attribute"`
	// Operators lists callers (by the same attribute) who see every
	// tenant, as without the setting. Default none.
	Operators []string `mapstructure:"operators"`

	// prevent unkeyed literal initialization
	_ struct{}
}

func (t *TenantScopeConfig) validate(cfg *Config) error {
	if t == nil {
		return nil
	}
	var errs []error
	if t.Attribute == "" {
		errs = append(errs, errors.New("tenant::attribute must not be empty"))
	}
	if !cfg.ServerConfig.Auth.HasValue() {
		errs = append(errs, errors.New("tenant needs auth: without an authenticator on the endpoint no caller is named"))
	}
	return errors.Join(errs...)
}

// caller is whom a scoped request answers: one tenant, or every tenant
// for an operator.
type caller struct {
	tenant string
	all    bool
}

type callerKey struct{}

// scope names the caller of every request when the API is scoped, and
// refuses a request whose authenticated caller has no tenant with 403.
func (e *statusExtension) scope(next http.Handler) http.Handler {
	t := e.cfg.Tenant
	if t == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var name string
		if auth := client.FromContext(r.Context()).Auth; auth != nil {
			name, _ = auth.GetAttribute(t.Attribute).(string)
		}
		if name == "" {
			writeError(w, http.StatusForbidden, fmt.Sprintf("the caller has no tenant (auth attribute %q)", t.Attribute))
			return
		}
		c := caller{tenant: name, all: slices.Contains(t.Operators, name)}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
	})
}

// callerOf returns the request's caller; ok is false when the API is not
// scoped or the caller is an operator: every tenant is then visible.
func callerOf(r *http.Request) (string, bool) {
	c, ok := r.Context().Value(callerKey{}).(caller)
	if !ok || c.all {
		return "", false
	}
	return c.tenant, true
}

// errOtherTenant is the answer to a scoped caller asking for another
// tenant's invocations.
func errOtherTenant(own, asked string) error {
	return fmt.Errorf("tenant %q may read only its own invocations and sessions, not tenant %q's", own, asked)
}

// ownTenant resolves the tenant a single-invocation or session request
// reads: for a scoped caller its own (a tenant parameter naming another
// is refused), else the parameter's.
func ownTenant(r *http.Request, asked string) (string, error) {
	own, scoped := callerOf(r)
	if !scoped {
		return asked, nil
	}
	if r.URL.Query().Has("tenant") && asked != own {
		return "", errOtherTenant(own, asked)
	}
	return own, nil
}

// scopeFilter restricts a list to a scoped caller's tenant.
func scopeFilter(r *http.Request, f *filter) error {
	own, scoped := callerOf(r)
	if !scoped {
		return nil
	}
	if f.byTenant && f.tenant != own {
		return errOtherTenant(own, f.tenant)
	}
	f.tenant, f.byTenant = own, true
	return nil
}
