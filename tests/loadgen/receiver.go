package main

import (
	"context"
	"net"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"

	"github.com/agentledger/agentledger/contract"
)

// summary is the first closing (final or incomplete) summary of one
// invocation, as it arrived.
type summary struct {
	at                time.Time
	status            string
	reasons           []string
	input, output     int64
	afterIn, afterOut int64
	spans             int64
}

// receiver is the OTLP/gRPC endpoint the collector exports to: it notes
// every span that comes back and the arrival of each invocation's first
// closing summary, and says when everything expected is back.
type receiver struct {
	ptraceotlp.UnimplementedGRPCServer

	server *grpc.Server
	addr   string

	// mu guards the fields below.
	mu sync.Mutex
	// echoed holds the spans seen again (trace and span ID), summaries
	// aside; wantSpans is how many distinct ones are expected.
	echoed    map[[24]byte]struct{}
	wantSpans int
	// summaries are by invocation id; wantSummaries (a set of ids) is
	// which are expected, nil when none are.
	summaries     map[string]summary
	wantSummaries map[string]bool
	pending       int
	// wantExtra is how many marked summary spans that no invocation
	// expects (an echo run's) must come back; extra counts them.
	wantExtra, extra int
	// captured, when not nil, receives a copy of every marked summary
	// span, one ResourceSpans per incoming ScopeSpans holding them.
	captured *ptrace.Traces
	done     chan struct{}
	doneAt   time.Time
	// warm is closed when a warm-up span came back.
	warm chan struct{}
}

// startReceiver listens on addr (host:port, port 0 for any).
func startReceiver(addr string) (*receiver, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	r := &receiver{server: grpc.NewServer(grpc.MaxRecvMsgSize(64 << 20)), addr: l.Addr().String(), warm: make(chan struct{})}
	ptraceotlp.RegisterGRPCServer(r.server, r)
	go func() { _ = r.server.Serve(l) }()
	return r, nil
}

// expect resets the receiver for a run that sends spans distinct spans
// and, when ids is not empty, waits for their closing summaries too; and
// for extra summary spans that no id expects. With capture it keeps a
// copy of the summaries that come back (captured).
func (r *receiver) expect(spans int, ids []string, extra int, capture bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.echoed = make(map[[24]byte]struct{}, spans)
	r.wantSpans = spans
	r.summaries = make(map[string]summary, len(ids))
	r.wantSummaries = nil
	if len(ids) > 0 {
		r.wantSummaries = make(map[string]bool, len(ids))
		for _, id := range ids {
			r.wantSummaries[id] = true
		}
	}
	r.pending = 0
	r.wantExtra, r.extra = extra, 0
	r.captured = nil
	if capture {
		td := ptrace.NewTraces()
		r.captured = &td
	}
	r.done = make(chan struct{})
	r.doneAt = time.Time{}
}

// Export implements ptraceotlp.GRPCServer.
func (r *receiver) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	rss := req.Traces().ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		_, collector := rss.At(i).Resource().Attributes().Get(contract.AttrSummaryCollector)
		sss := rss.At(i).ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			// A summary is a span with the summary name and the marker
			// (CONTRACT.md v0.3); a span with the name alone is neither a
			// summary nor one of ours.
			marked := collector && sss.At(j).Scope().Name() == contract.SummaryScopeName
			if marked && r.captured != nil {
				r.capture(rss.At(i), sss.At(j))
			}
			spans := sss.At(j).Spans()
			for k := 0; k < spans.Len(); k++ {
				sp := spans.At(k)
				if sp.Name() == warmupSpanName {
					select {
					case <-r.warm:
					default:
						close(r.warm)
					}
					continue
				}
				if sp.Name() == contract.SpanNameSummary && !marked {
					continue
				}
				if sp.Name() != contract.SpanNameSummary {
					var key [24]byte
					tid, sid := sp.TraceID(), sp.SpanID()
					copy(key[:16], tid[:])
					copy(key[16:], sid[:])
					r.echoed[key] = struct{}{}
					continue
				}
				if r.wantSummaries == nil {
					r.extra++
					continue
				}
				r.noteSummary(sp.Attributes(), now)
			}
		}
	}
	if r.done != nil && r.doneAt.IsZero() && len(r.echoed) >= r.wantSpans && len(r.summaries) >= len(r.wantSummaries) && r.extra >= r.wantExtra {
		r.doneAt = now
		close(r.done)
	}
	return ptraceotlp.NewExportResponse(), nil
}

// capture copies the summaries of ss, under its resource rs, to
// r.captured. r.mu must be held.
func (r *receiver) capture(rs ptrace.ResourceSpans, ss ptrace.ScopeSpans) {
	out := r.captured.ResourceSpans().AppendEmpty()
	rs.Resource().CopyTo(out.Resource())
	outSS := out.ScopeSpans().AppendEmpty()
	ss.Scope().CopyTo(outSS.Scope())
	for _, sp := range ss.Spans().All() {
		if sp.Name() == contract.SpanNameSummary {
			sp.CopyTo(outSS.Spans().AppendEmpty())
		}
	}
}

// noteSummary keeps the first closing summary of an expected invocation.
// r.mu must be held.
func (r *receiver) noteSummary(attrs pcommon.Map, now time.Time) {
	id := str(attrs, contract.AttrInvocationID)
	status := str(attrs, contract.AttrStatus)
	if status == contract.StatusPending {
		r.pending++
		return
	}
	if _, seen := r.summaries[id]; seen || !r.wantSummaries[id] {
		return
	}
	s := summary{at: now, status: status,
		input: num(attrs, contract.AttrUsageInputTokens), output: num(attrs, contract.AttrUsageOutputTokens),
		afterIn: num(attrs, contract.AttrAfterResultInput), afterOut: num(attrs, contract.AttrAfterResultOutput),
		spans: num(attrs, contract.AttrSpans)}
	if v, ok := attrs.Get(contract.AttrIncompleteReasons); ok {
		for _, e := range v.Slice().All() {
			s.reasons = append(s.reasons, e.AsString())
		}
	}
	r.summaries[id] = s
}

func str(attrs pcommon.Map, key string) string {
	v, _ := attrs.Get(key)
	return v.Str()
}

func num(attrs pcommon.Map, key string) int64 {
	v, _ := attrs.Get(key)
	return v.Int()
}

// wait returns when everything expected came back, or ctx ends.
func (r *receiver) wait(ctx context.Context) (time.Time, error) {
	r.mu.Lock()
	done := r.done
	r.mu.Unlock()
	select {
	case <-done:
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.doneAt, nil
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}

// progress says how much of what is expected came back.
func (r *receiver) progress() (spans, summaries, pending int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.echoed), len(r.summaries), r.pending
}

// results returns the closing summaries by invocation id.
func (r *receiver) results() map[string]summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.summaries
}

func (r *receiver) stop() { r.server.Stop() }
