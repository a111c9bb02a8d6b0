package genaicall

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

	"github.com/agentledger/agentledger/contract"
)

// call is one logical model call: one span over all its attempts.
type call struct {
	m            *Middleware
	span         trace.Span
	operation    string
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
	timers   []Stopper
	stopCtx  []func() bool
	res      Result
	// last is the ending of the last attempt that failed (transport or
	// error status); unknown the first attempt ending whose bill is
	// unknown, which decides the call's (worse).
	last, unknown Ending
	// onEnd is the current attempt's Request.OnEnd.
	onEnd func(Ending, Usage)
}

// Result is what the response told about a call. A wrapper's Parser fills
// it; the span is ended with it.
type Result struct {
	// Parsed is set once any of the response could be read.
	Parsed bool
	// Done is set by the middleware when the parser read a stream's
	// terminal event, or a plain body whole: the response is all there,
	// and its usage, if any, is the bill (unless it carried an error).
	Done bool
	// ID and Model are gen_ai.response.id and gen_ai.response.model.
	ID, Model string
	// Finish holds the gen_ai.response.finish_reasons, each once.
	Finish []string
	// ToolCalls holds the tool calls the model asked for, "name:id".
	ToolCalls []string
	// Usage holds the usage in GenAI terms.
	Usage Usage
	// ErrType and ErrMsg describe an error the response body carried.
	ErrType, ErrMsg string
	// Text is the response text, kept only when content is captured.
	Text strings.Builder
}

// Usage holds the usage counts a response carried, in the GenAI
// conventions' terms (cache tokens in Input, reasoning in Output); nil
// means absent. Negative counts are dropped when the span ends.
type Usage struct {
	Input, Output, CacheRead, CacheCreation, Reasoning *int64
}

// valid returns u without the counts that are not token counts: a
// negative number in a response is dropped rather than recorded, so that
// no span or metric carries it.
func (u Usage) valid() Usage {
	for _, p := range []**int64{&u.Input, &u.Output, &u.CacheRead, &u.CacheCreation, &u.Reasoning} {
		if *p != nil && **p < 0 {
			*p = nil
		}
	}
	return u
}

// AddFinish adds a finish reason unless it is empty or already there.
func (r *Result) AddFinish(reason string) {
	if reason == "" {
		return
	}
	for _, f := range r.Finish {
		if f == reason {
			return
		}
	}
	r.Finish = append(r.Finish, reason)
}

// AddToolCall adds a tool call the model asked for.
func (r *Result) AddToolCall(name, id string) {
	r.ToolCalls = append(r.ToolCalls, name+":"+id)
}

// attempt records the end of one attempt; ending is set for a failed one.
func (c *call) attempt(resend int, end time.Time, status int, errType string, err error, ending Ending) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.attempts++
	c.lastEnd = end
	if ending != "" {
		c.last = ending
		if c.unknown == "" && ending.Bill() == BillUnknown {
			c.unknown = ending
		}
	}
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
	end, last, err := c.lastEnd, c.last, c.err
	c.mu.Unlock()
	c.end(end, last, err)
}

// end ends the call's span once, with what ending means for its bill
// (Ending.Bill); err is the error that ended the last attempt, if any.
func (c *call) end(at time.Time, ending Ending, err error) {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	c.ended = true
	r := &c.res
	ending = worse(c.unknown, ending)
	errType, callErr := c.errType, c.err
	attempts, onEnd := c.attempts, c.onEnd
	c.mu.Unlock()

	attrs := make([]attribute.KeyValue, 0, 16)
	if r.Model != "" {
		attrs = append(attrs, attribute.String(contract.AttrResponseModel, r.Model))
	}
	if r.ID != "" {
		attrs = append(attrs, attribute.String(attrResponseID, r.ID))
	}
	if len(r.Finish) > 0 {
		attrs = append(attrs, attribute.StringSlice(attrFinishReasons, r.Finish))
	}
	if len(r.ToolCalls) > 0 {
		attrs = append(attrs, attribute.StringSlice(attrResponseToolCalls, r.ToolCalls))
	}
	attrs = append(attrs, attribute.String(attrEnding, string(ending)))
	var u Usage
	switch ending.Bill() {
	case BillKnown:
		u = r.Usage.valid()
		errType, callErr = "", nil
	case BillNone:
		if errType == "" {
			errType = string(ending)
		}
	default:
		// What the provider billed is unknown: no usage and no error
		// status (contract rule 5: a call with status Error and no usage
		// was not billed), so that the invocation closes incomplete
		// (usage_missing), never final with a partial count or without
		// it. The error stays on the span as an event.
		if r.ErrType != "" {
			c.span.RecordError(errors.New(r.ErrType+": "+r.ErrMsg), trace.WithTimestamp(at))
		} else if err != nil {
			c.span.RecordError(err, trace.WithTimestamp(at))
		}
		errType, callErr = "", nil
	}
	for _, f := range []struct {
		key string
		v   *int64
	}{
		{contract.AttrUsageInputTokens, u.Input},
		{contract.AttrUsageOutputTokens, u.Output},
		{contract.AttrUsageCacheReadTokens, u.CacheRead},
		{contract.AttrUsageCacheCreateTokens, u.CacheCreation},
		{contract.AttrUsageReasoningTokens, u.Reasoning},
	} {
		if f.v != nil {
			attrs = append(attrs, attribute.Int64(f.key, *f.v))
		}
	}
	if attempts > 1 {
		attrs = append(attrs, attribute.Int(attrResendCount, attempts-1))
	}
	if ending == EndingCallerClosed || ending == EndingCut {
		attrs = append(attrs, attribute.Bool(attrStreamClosedEarly, true))
	}
	if c.m.cfg.CaptureContent && r.Text.Len() > 0 {
		out, _ := json.Marshal([]map[string]any{{
			"role": "assistant", "parts": []map[string]string{{"type": "text", "content": r.Text.String()}},
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
	c.record(at, errType, u)
	if onEnd != nil {
		onEnd(ending, u)
	}
}

// record adds the call to the GenAI client metrics.
func (c *call) record(at time.Time, errType string, u Usage) {
	attrs := []attribute.KeyValue{
		attribute.String(contract.AttrOperationName, c.operation),
		attribute.String(contract.AttrProviderName, c.m.provider),
	}
	if c.requestModel != "" {
		attrs = append(attrs, attribute.String(contract.AttrRequestModel, c.requestModel))
	}
	if c.res.Model != "" {
		attrs = append(attrs, attribute.String(contract.AttrResponseModel, c.res.Model))
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
	if v := u.Input; v != nil {
		c.m.tokens.Record(ctx, *v, metric.WithAttributes(append(attrs[:len(attrs):len(attrs)], attribute.String(attrTokenType, "input"))...))
	}
	if v := u.Output; v != nil {
		c.m.tokens.Record(ctx, *v, metric.WithAttributes(append(attrs[:len(attrs):len(attrs)], attribute.String(attrTokenType, "output"))...))
	}
}
