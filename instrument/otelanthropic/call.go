package otelanthropic

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/instrument/internal/genaicall"
	"github.com/agentledger/agentledger/internal/contract"
)

// call is one logical model call: one span over all its attempts.
type call struct {
	m            *middleware
	span         trace.Span
	op           operation
	start        time.Time
	requestModel string
	server       string
	port         int

	// mu guards everything below; res is also written by the body
	// wrappers' parsers, which run under their own locks, before end.
	mu       sync.Mutex
	ended    bool
	attempts int
	errType  string
	err      error
	lastEnd  time.Time
	parkGen  uint64
	timers   []genaicall.Stopper
	stopCtx  []func() bool
	res      result
}

// result is what the response told about the call.
type result struct {
	parsed    bool
	id        string
	model     string
	finish    []string
	toolCalls []string
	usage     usage
	rawInput  *int64 // Anthropic's input_tokens, without cache tokens
	errType   string
	errMsg    string
	text      strings.Builder
}

// usage holds the usage counts a response carried; nil means absent.
type usage struct {
	input, output, cacheRead, cacheCreation, reasoning *int64
}

func (r *result) addFinish(reason string) {
	if reason == "" {
		return
	}
	for _, f := range r.finish {
		if f == reason {
			return
		}
	}
	r.finish = append(r.finish, reason)
}

func (r *result) addToolCall(name, id string) {
	r.toolCalls = append(r.toolCalls, name+":"+id)
}

// attempt records the end of one attempt.
func (c *call) attempt(resend int, end time.Time, status int, errType string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.attempts++
	c.lastEnd = end
	attrs := []attribute.KeyValue{attribute.Int(attrResendCount, resend)}
	if status != 0 {
		attrs = append(attrs, attribute.Int(attrHTTPStatusCode, status))
	}
	if errType != "" {
		attrs = append(attrs, attribute.String(attrErrorType, errType))
		c.errType, c.err = errType, err
	}
	c.span.AddEvent(eventAttempt, trace.WithTimestamp(end), trace.WithAttributes(attrs...))
}

// clearError forgets the failures of earlier attempts once one succeeded.
func (c *call) clearError() {
	c.mu.Lock()
	c.errType, c.err = "", nil
	c.mu.Unlock()
}

// unpark stops the timers of a parked call taken by its next attempt.
func (c *call) unpark() {
	c.mu.Lock()
	ts, ss := c.timers, c.stopCtx
	c.timers, c.stopCtx = nil, nil
	c.mu.Unlock()
	for _, t := range ts {
		t.Stop()
	}
	for _, s := range ss {
		s()
	}
}

// endParked ends a call whose last attempt failed and was not retried.
func (c *call) endParked() {
	c.unpark()
	c.mu.Lock()
	end := c.lastEnd
	c.mu.Unlock()
	c.end(end, nil, false)
}

// end ends the call's span once, with what the response told.
func (c *call) end(at time.Time, err error, early bool) {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	c.ended = true
	r := &c.res
	errType, callErr := c.errType, c.err
	if r.errType != "" {
		errType, callErr = r.errType, errors.New(r.errMsg)
	}
	if err != nil {
		errType, callErr = errTypeStreamClosed, err
	}
	attempts := c.attempts
	c.mu.Unlock()

	attrs := make([]attribute.KeyValue, 0, 16)
	if r.model != "" {
		attrs = append(attrs, attribute.String(contract.AttrResponseModel, r.model))
	}
	if r.id != "" {
		attrs = append(attrs, attribute.String(attrResponseID, r.id))
	}
	if len(r.finish) > 0 {
		attrs = append(attrs, attribute.StringSlice(attrFinishReasons, r.finish))
	}
	if len(r.toolCalls) > 0 {
		attrs = append(attrs, attribute.StringSlice(attrResponseToolCalls, r.toolCalls))
	}
	u := r.usage
	for _, f := range []struct {
		key string
		v   *int64
	}{
		{contract.AttrUsageInputTokens, u.input},
		{contract.AttrUsageOutputTokens, u.output},
		{contract.AttrUsageCacheReadTokens, u.cacheRead},
		{contract.AttrUsageCacheCreateTokens, u.cacheCreation},
		{contract.AttrUsageReasoningTokens, u.reasoning},
	} {
		if f.v != nil {
			attrs = append(attrs, attribute.Int64(f.key, *f.v))
		}
	}
	if attempts > 1 {
		attrs = append(attrs, attribute.Int(attrResendCount, attempts-1))
	}
	if early {
		attrs = append(attrs, attribute.Bool(attrStreamClosedEarly, true))
	}
	if c.m.cfg.CaptureContent && r.text.Len() > 0 {
		out, _ := json.Marshal([]map[string]any{{
			"role": "assistant", "parts": []map[string]string{{"type": "text", "content": r.text.String()}},
		}})
		attrs = append(attrs, attribute.String(attrOutputMessages, string(out)))
	}
	if errType != "" {
		attrs = append(attrs, attribute.String(attrErrorType, errType))
		msg := errType
		if callErr != nil {
			msg = callErr.Error()
			c.span.RecordError(callErr, trace.WithTimestamp(at))
		}
		c.span.SetStatus(codes.Error, msg)
	}
	c.span.SetAttributes(attrs...)
	c.span.End(trace.WithTimestamp(at))
	c.record(at, errType)
}

// record adds the call to the GenAI client metrics.
func (c *call) record(at time.Time, errType string) {
	attrs := []attribute.KeyValue{
		attribute.String(contract.AttrOperationName, c.op.name()),
		attribute.String(contract.AttrProviderName, providerAnthropic),
	}
	if c.requestModel != "" {
		attrs = append(attrs, attribute.String(contract.AttrRequestModel, c.requestModel))
	}
	if c.res.model != "" {
		attrs = append(attrs, attribute.String(contract.AttrResponseModel, c.res.model))
	}
	if c.server != "" {
		attrs = append(attrs, attribute.String(attrServerAddress, c.server), attribute.Int(attrServerPort, c.port))
	}
	ctx := context.Background()
	durAttrs := attrs
	if errType != "" {
		durAttrs = append(durAttrs[:len(durAttrs):len(durAttrs)], attribute.String(attrErrorType, errType))
	}
	c.m.duration.Record(ctx, at.Sub(c.start).Seconds(), metric.WithAttributes(durAttrs...))
	if v := c.res.usage.input; v != nil {
		c.m.tokens.Record(ctx, *v, metric.WithAttributes(append(attrs[:len(attrs):len(attrs)], attribute.String(attrTokenType, "input"))...))
	}
	if v := c.res.usage.output; v != nil {
		c.m.tokens.Record(ctx, *v, metric.WithAttributes(append(attrs[:len(attrs):len(attrs)], attribute.String(attrTokenType, "output"))...))
	}
}
