package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/agentledger/agentledger/contract"
)

// receiver is an in-test OTLP/gRPC trace receiver.
type receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex // guards spans
	spans []*tracepb.Span
}

func (r *receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func otlpAttr(attrs []*commonpb.KeyValue, key string) *commonpb.AnyValue {
	for _, kv := range attrs {
		if kv.Key == key {
			return kv.Value
		}
	}
	return nil
}

// TestOTLPExportFollowsContract runs the background scenario exporting to
// an OTLP receiver and checks, from the exported spans alone, the
// contract's finality conditions and the sums the in-process ledger
// printed.
func TestOTLPExportFollowsContract(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rcv := &receiver{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, rcv)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	var stdout bytes.Buffer
	cfg := config{scenario: "background", otlp: lis.Addr().String(), timeout: time.Minute}
	if err := run(context.Background(), cfg, &stdout, slog.New(slog.NewTextHandler(testWriter{t}, nil))); err != nil {
		t.Fatal(err)
	}
	var l line
	if err := json.Unmarshal(stdout.Bytes(), &l); err != nil {
		t.Fatalf("stdout %q: %v", stdout.String(), err)
	}

	rcv.mu.Lock()
	spans := rcv.spans
	rcv.mu.Unlock()
	arrivedChildren := map[string]int{}
	followups := map[string]int{}
	var root *tracepb.Span
	var in, out, arIn, arOut, calls int64
	for _, s := range spans {
		if v := otlpAttr(s.Attributes, contract.AttrInvocationID); v.GetStringValue() != l.InvocationID {
			t.Errorf("span %q invocation.id %v, want %s", s.Name, v, l.InvocationID)
		}
		if otlpAttr(s.Attributes, contract.AttrChildren) == nil {
			t.Errorf("span %q lacks invocation.children", s.Name)
		}
		if len(s.ParentSpanId) > 0 {
			arrivedChildren[hex.EncodeToString(s.ParentSpanId)]++
		}
		for _, link := range s.Links {
			if otlpAttr(link.Attributes, contract.AttrLink).GetStringValue() == contract.LinkFollowup {
				followups[hex.EncodeToString(link.SpanId)]++
			}
		}
		if otlpAttr(s.Attributes, contract.AttrRole).GetStringValue() == contract.RoleRoot {
			root = s
		}
	}
	if root == nil {
		t.Fatal("no root span exported")
	}
	for _, s := range spans {
		id := hex.EncodeToString(s.SpanId)
		if n := otlpAttr(s.Attributes, contract.AttrChildren).GetIntValue(); int64(arrivedChildren[id]) < n {
			t.Errorf("span %q declares %d children, %d exported", s.Name, n, arrivedChildren[id])
		}
		if otlpAttr(s.Attributes, contract.AttrRole).GetStringValue() == contract.RoleBackground {
			if k := otlpAttr(s.Attributes, contract.AttrFollowups).GetIntValue(); int64(followups[id]) < k {
				t.Errorf("background span declares %d followups, %d exported", k, followups[id])
			}
		}
		if otlpAttr(s.Attributes, contract.AttrOperationName).GetStringValue() == contract.OpChat {
			i := otlpAttr(s.Attributes, contract.AttrUsageInputTokens).GetIntValue()
			o := otlpAttr(s.Attributes, contract.AttrUsageOutputTokens).GetIntValue()
			in, out, calls = in+i, out+o, calls+1
			if s.StartTimeUnixNano > root.EndTimeUnixNano {
				arIn, arOut = arIn+i, arOut+o
			}
		}
	}
	if in != l.InputTokens || out != l.OutputTokens || arIn != l.AfterResultInputTokens ||
		arOut != l.AfterResultOutputTokens || calls != l.ModelCalls || !bgWant.matches(l) {
		t.Errorf("exported sums in=%d out=%d after=%d/%d calls=%d; printed %+v", in, out, arIn, arOut, calls, l)
	}
}
