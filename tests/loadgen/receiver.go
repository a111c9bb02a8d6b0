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
// invocation, as it arrived, and the spans of it that came back: a
// fixed-size record per invocation.
type summary struct {
	// at is the summary's arrival in Unix nanoseconds; 0: none came.
	at                int64
	input, output     int64
	afterIn, afterOut int64
	spans             int64
	// back has bit slot-1 set for each of the invocation's spans that came
	// back (spanSlot).
	back uint16
	// final: the summary's status is final; any other status is in the
	// receiver's closing map with its reasons.
	final bool
}

// closing is the status and reasons of a closing summary that is not
// final (rare: each is a wrong invocation).
type closing struct {
	status  string
	reasons []string
}

// receiver is the OTLP/gRPC endpoint the collector exports to: it notes
// every span that comes back and the arrival of each invocation's first
// closing summary, and says when everything expected is back. What it
// keeps is bounded by the invocations (a summary record each), not by the
// spans.
type receiver struct {
	ptraceotlp.UnimplementedGRPCServer

	server *grpc.Server
	addr   string

	// mu guards the fields below.
	mu sync.Mutex
	// want is the workload's invocations; got their summaries and spans
	// back, by index; backSpans counts the distinct spans back,
	// wantSpans how many are expected.
	want                 []expected
	got                  []summary
	backSpans, wantSpans int
	// summarised: closing summaries are expected, one per invocation;
	// closings counts the invocations that have theirs; notFinal holds
	// the closing summaries that are not final, by index.
	summarised bool
	closings   int
	notFinal   map[int]closing
	pending    int
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

// expect resets the receiver for a run that sends the spans of the
// invocations in want (spans distinct ones) and, with summarised, waits
// for their closing summaries too; and for extra summary spans that no
// invocation expects. With capture it keeps a copy of the summaries that
// come back (captured).
func (r *receiver) expect(want []expected, spans int, summarised bool, extra int, capture bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.want = want
	r.got = make([]summary, len(want))
	r.backSpans, r.wantSpans = 0, spans
	r.summarised = summarised
	r.closings = 0
	r.notFinal = map[int]closing{}
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
					r.noteSpan(sp.SpanID())
					continue
				}
				if !r.summarised {
					r.extra++
					continue
				}
				r.noteSummary(sp.Attributes(), now)
			}
		}
	}
	if r.done != nil && r.doneAt.IsZero() && r.backSpans >= r.wantSpans && (!r.summarised || r.closings >= len(r.want)) && r.extra >= r.wantExtra {
		r.doneAt = now
		close(r.done)
	}
	return ptraceotlp.NewExportResponse(), nil
}

// noteSpan sets the bit of a workload span that came back, counting it
// the first time. r.mu must be held.
func (r *receiver) noteSpan(id pcommon.SpanID) {
	i, slot, ok := spanSlot(id)
	if !ok || i >= len(r.got) {
		return
	}
	bit := uint16(1) << (slot - 1)
	if r.want[i].mask&bit == 0 || r.got[i].back&bit != 0 {
		return
	}
	r.got[i].back |= bit
	r.backSpans++
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

// noteSummary keeps the first closing summary of an expected invocation:
// one whose id is a workload invocation's, index and second half alike.
// r.mu must be held.
func (r *receiver) noteSummary(attrs pcommon.Map, now time.Time) {
	status := str(attrs, contract.AttrStatus)
	if status == contract.StatusPending {
		r.pending++
		return
	}
	i, low, ok := parseInvocationID(str(attrs, contract.AttrInvocationID))
	if !ok || i >= len(r.want) || r.want[i].idLow != low || r.got[i].at != 0 {
		return
	}
	s := &r.got[i]
	s.at = now.UnixNano()
	s.final = status == contract.StatusFinal
	s.input, s.output = num(attrs, contract.AttrUsageInputTokens), num(attrs, contract.AttrUsageOutputTokens)
	s.afterIn, s.afterOut = num(attrs, contract.AttrAfterResultInput), num(attrs, contract.AttrAfterResultOutput)
	s.spans = num(attrs, contract.AttrSpans)
	r.closings++
	if !s.final {
		c := closing{status: status}
		if v, ok := attrs.Get(contract.AttrIncompleteReasons); ok {
			for _, e := range v.Slice().All() {
				c.reasons = append(c.reasons, e.AsString())
			}
		}
		r.notFinal[i] = c
	}
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
	return r.backSpans, r.closings, r.pending
}

// results returns the closing summaries by invocation index and the
// status and reasons of those not final.
func (r *receiver) results() ([]summary, map[int]closing) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got, r.notFinal
}

func (r *receiver) stop() { r.server.Stop() }
