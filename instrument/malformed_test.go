package instrument

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentledger/agentledger/contract"
)

// Issue 19, finding 3, in process: a rule attribute of the wrong type is
// malformed, never absent. A job whose role is an array does not close
// final while its followup never arrives.
func TestMalformedRoleNeverFinal(t *testing.T) {
	root, tool, job := spanCtx(1, 1), spanCtx(1, 2), spanCtx(1, 3)
	sl := newStubLedger(t)
	sl.feed(rootStub(root, 1), toolStub(tool, root, 1),
		stub("background shell", job, tool, 50,
			attribute.StringSlice(contract.AttrRole, []string{contract.RoleBackground}),
			attribute.Int(contract.AttrFollowups, 1), attribute.Int(contract.AttrChildren, 0)))
	wantStatus(t, sl.summary("inv"), contract.StatusIncomplete, "malformed_attribute:invocation.role on background shell")
}

// A followup link whose invocation.link is not a string discharges
// nothing and is malformed.
func TestMalformedLinkKindInProcess(t *testing.T) {
	root, tool, job, cont := spanCtx(1, 1), spanCtx(1, 2), spanCtx(1, 3), spanCtx(2, 9)
	sl := newStubLedger(t)
	bad := sdktrace.Link{SpanContext: job, Attributes: []attribute.KeyValue{attribute.Int(contract.AttrLink, 1)}}
	sl.feed(rootStub(root, 1), toolStub(tool, root, 1), jobStub(job, tool, 1), contStub(cont, 0, bad))
	s := sl.summary("inv")
	if s.Status == contract.StatusFinal {
		t.Fatalf("final with a malformed followup link: %+v", s)
	}
	found := false
	for _, r := range s.Reasons {
		found = found || r == "malformed_attribute:invocation.link on continue_agent a"
	}
	if !found {
		t.Errorf("reasons %q lack the malformed link", s.Reasons)
	}
}

// A mistyped usage count on a model call is invalid_usage, in process as
// in the collector.
func TestMalformedUsageInProcess(t *testing.T) {
	root, chat := spanCtx(1, 1), spanCtx(1, 2)
	sl := newStubLedger(t)
	sl.feed(rootStub(root, 1), stub("chat", chat, root, 5,
		attribute.String(contract.AttrOperationName, contract.OpChat),
		attribute.String(contract.AttrUsageInputTokens, "10"), attribute.Int(contract.AttrUsageOutputTokens, 1),
		attribute.Int(contract.AttrChildren, 0)))
	wantStatus(t, sl.summary("inv"), contract.StatusIncomplete, "invalid_usage:gen_ai.usage.input_tokens on chat")
}
