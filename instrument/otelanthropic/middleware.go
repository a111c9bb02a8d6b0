package otelanthropic

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument/internal/genaicall"
)

const providerAnthropic = contract.ProviderAnthropic

// Middleware returns an Anthropic SDK middleware that traces Messages
// calls; see the package doc. Other requests pass through untouched. Use
// ClientOptions unless the SDK's own spans are already off.
func Middleware(opts ...Option) option.Middleware {
	return newMiddleware(newConfig(opts)).handle
}

// ClientOptions returns the client options that install Middleware and
// turn off the SDK's own OpenTelemetry spans, which would otherwise be a
// second "chat" span with the same usage around each call and count it
// twice.
func ClientOptions(opts ...Option) []option.RequestOption {
	return []option.RequestOption{
		option.WithoutOpenTelemetry(),
		option.WithMiddleware(Middleware(opts...)),
	}
}

type middleware struct {
	*genaicall.Middleware

	// warned is set once the SDK's own spans were reported.
	warned atomic.Bool
}

func newMiddleware(cfg genaicall.Config) *middleware {
	return &middleware{Middleware: genaicall.New(cfg, genaicall.Scope{Name: ScopeName, Version: Version(), Provider: providerAnthropic})}
}

func (m *middleware) handle(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	op, ok := classify(req)
	if !ok || req.Body == nil || req.Body == http.NoBody {
		return next(req)
	}
	m.checkSDKSpan(req.Context())
	return m.Handle(req, next, op.describe)
}

// sdkScopePrefix starts the instrumentation scope of the SDK's own spans
// ("com.anthropic.sdk.go", with a platform suffix for Bedrock or Vertex).
const sdkScopePrefix = "com.anthropic.sdk.go"

// errSDKSpans is reported through the OpenTelemetry error handler when the
// SDK's own span is the parent of a traced call.
var errSDKSpans = errors.New("otelanthropic: the Anthropic SDK's own OpenTelemetry spans are on: each call is then two model-call spans and its usage counts twice; create the client with ClientOptions, or add option.WithoutOpenTelemetry()")

// checkSDKSpan reports, once, a call whose parent is the SDK's own span.
func (m *middleware) checkSDKSpan(ctx context.Context) {
	if m.warned.Load() {
		return
	}
	s, ok := trace.SpanFromContext(ctx).(interface {
		InstrumentationScope() instrumentation.Scope
	})
	if ok && strings.HasPrefix(s.InstrumentationScope().Name, sdkScopePrefix) && m.warned.CompareAndSwap(false, true) {
		otel.Handle(errSDKSpans)
	}
}
