package testbin

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
)

// Summary is one invocation.summary span, as the collector emitted it.
type Summary struct {
	TraceID, SpanID string
	// Service is the service.name of the span's resource.
	Service string
	// Collector names the collector that emitted it (the marker's
	// invocation.collector); Tenant is its invocation.tenant, empty
	// without tenants.
	Collector, Tenant string

	InvocationID, ConversationID, AgentName string
	Status                                  string
	Revision                                int64
	IncompleteReasons, Anomalies            []string

	InputTokens, OutputTokens, CacheReadTokens, CacheCreationTokens, ReasoningTokens int64
	AfterResultInputTokens, AfterResultOutputTokens                                  int64

	ModelCalls, BackgroundJobs, Continuations, Spans, Traces, DuplicateSpans int64

	// TimeToFinalMS is valid when HasTimeToFinal.
	TimeToFinalMS  int64
	HasTimeToFinal bool

	// Links are the summary's links (one per continuation root), as
	// "traceID/spanID".
	Links []string
}

// SummariesFromTraces returns every summary span in td, in order: the
// spans named invocation.summary that carry the processor's marker (its
// instrumentation scope and an invocation.collector resource attribute),
// as every consumer of summaries must select them (CONTRACT.md v0.3).
func SummariesFromTraces(td ptrace.Traces) []Summary {
	var out []Summary
	for _, rs := range td.ResourceSpans().All() {
		service := str(rs.Resource().Attributes(), "service.name")
		collector := str(rs.Resource().Attributes(), contract.AttrSummaryCollector)
		if collector == "" {
			continue
		}
		for _, ss := range rs.ScopeSpans().All() {
			if ss.Scope().Name() != contract.SummaryScopeName {
				continue
			}
			for _, span := range ss.Spans().All() {
				if span.Name() != contract.SpanNameSummary {
					continue
				}
				s := summaryOf(span)
				s.Service, s.Collector = service, collector
				out = append(out, s)
			}
		}
	}
	return out
}

func summaryOf(span ptrace.Span) Summary {
	a := span.Attributes()
	s := Summary{
		TraceID:                 span.TraceID().String(),
		SpanID:                  span.SpanID().String(),
		InvocationID:            str(a, contract.AttrInvocationID),
		Tenant:                  str(a, contract.AttrTenant),
		ConversationID:          str(a, contract.AttrConversationID),
		AgentName:               str(a, contract.AttrAgentName),
		Status:                  str(a, contract.AttrStatus),
		Revision:                num(a, contract.AttrRevision),
		IncompleteReasons:       strs(a, contract.AttrIncompleteReasons),
		Anomalies:               strs(a, contract.AttrAnomalies),
		InputTokens:             num(a, contract.AttrUsageInputTokens),
		OutputTokens:            num(a, contract.AttrUsageOutputTokens),
		CacheReadTokens:         num(a, contract.AttrUsageCacheReadTokens),
		CacheCreationTokens:     num(a, contract.AttrUsageCacheCreateTokens),
		ReasoningTokens:         num(a, contract.AttrUsageReasoningTokens),
		AfterResultInputTokens:  num(a, contract.AttrAfterResultInput),
		AfterResultOutputTokens: num(a, contract.AttrAfterResultOutput),
		ModelCalls:              num(a, contract.AttrModelCalls),
		BackgroundJobs:          num(a, contract.AttrBackgroundJobs),
		Continuations:           num(a, contract.AttrContinuations),
		Spans:                   num(a, contract.AttrSpans),
		Traces:                  num(a, contract.AttrTraces),
		DuplicateSpans:          num(a, contract.AttrDuplicateSpans),
	}
	if v, ok := a.Get(contract.AttrTimeToFinalMS); ok {
		s.TimeToFinalMS, s.HasTimeToFinal = v.Int(), true
	}
	for _, l := range span.Links().All() {
		s.Links = append(s.Links, l.TraceID().String()+"/"+l.SpanID().String())
	}
	return s
}

func str(a pcommon.Map, key string) string {
	if v, ok := a.Get(key); ok {
		return v.AsString()
	}
	return ""
}

func num(a pcommon.Map, key string) int64 {
	if v, ok := a.Get(key); ok && v.Type() == pcommon.ValueTypeInt {
		return v.Int()
	}
	return 0
}

func strs(a pcommon.Map, key string) []string {
	v, ok := a.Get(key)
	if !ok || v.Type() != pcommon.ValueTypeSlice {
		return nil
	}
	out := make([]string, 0, v.Slice().Len())
	for _, e := range v.Slice().All() {
		out = append(out, e.AsString())
	}
	return out
}

// ReadTraces parses a file exporter's OTLP JSON output (one
// ExportTraceServiceRequest per line). A last line without its newline may
// still be being written and is left for the next read.
func ReadTraces(path string) ([]ptrace.Traces, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("testbin: %w", err)
	}
	defer f.Close()
	var (
		out []ptrace.Traces
		um  ptrace.JSONUnmarshaler
		r   = bufio.NewReader(f)
	)
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return out, nil // a partial last line waits for the writer
		}
		if err != nil {
			return nil, fmt.Errorf("testbin: read %s: %w", path, err)
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		td, err := um.UnmarshalTraces(line)
		if err != nil {
			return nil, fmt.Errorf("testbin: %s line %d: %w", path, n, err)
		}
		out = append(out, td)
	}
}

// ReadSummaries returns every summary span in a file exporter's output, in
// the order written.
func ReadSummaries(path string) ([]Summary, error) {
	tds, err := ReadTraces(path)
	if err != nil {
		return nil, err
	}
	var out []Summary
	for _, td := range tds {
		out = append(out, SummariesFromTraces(td)...)
	}
	return out, nil
}

// Closed returns, per invocation ID, its latest closing summary: the one
// with status final or incomplete and the highest revision. Pending
// summaries are left out.
func Closed(sums []Summary) map[string]Summary {
	out := make(map[string]Summary)
	for _, s := range sums {
		if s.Status == contract.StatusPending {
			continue
		}
		if prev, ok := out[s.InvocationID]; ok && prev.Revision >= s.Revision {
			continue
		}
		out[s.InvocationID] = s
	}
	return out
}

// WaitClosed polls the collector's traces file at path (every 100ms,
// until ctx ends) until each of ids has a closing summary, and returns
// every invocation's latest closing summary (Closed).
func WaitClosed(ctx context.Context, path string, ids []string) (map[string]Summary, error) {
	var closed map[string]Summary
	err := Poll(ctx, 100*time.Millisecond, func() (bool, string, error) {
		sums, err := ReadSummaries(path)
		if err != nil {
			return false, err.Error(), nil
		}
		closed = Closed(sums)
		for _, id := range ids {
			if _, ok := closed[id]; !ok {
				return false, "no closing summary for " + id, nil
			}
		}
		return true, "", nil
	})
	return closed, err
}
