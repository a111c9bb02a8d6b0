package otelclaudecode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/internal/genaicall"
	"github.com/agentledger/agentledger/instrument/internal/wireproxy"
)

// wireRig drives a mapper's attribution without the CLI: requests are
// built here, and each decided call is a model-call span with usage, as
// the proxy's middleware makes it.
type wireRig struct {
	t      *testing.T
	p      *pipeline
	m      *mapper
	synced bool
}

func newWireRig(t *testing.T) *wireRig {
	p := newPipeline(t, nil)
	r := &wireRig{t: t, p: p, m: p.mapper("wire-session"), synced: true}
	r.m.syncStream = func() bool { return r.synced }
	return r
}

// line feeds one stream-json line to the mapper.
func (r *wireRig) line(s string) {
	r.t.Helper()
	ev, err := decodeEvent([]byte(s))
	if err != nil {
		r.t.Fatalf("%s: %v", s, err)
	}
	r.m.handle(ev)
}

// call attributes a request whose messages are msgs (and agent header),
// and makes its call: a span under the decision with usage in/out, the
// tool uses tools, then Done. It returns the decision's invocation id.
func (r *wireRig) call(agent string, msgs []map[string]any, in, out int64, tools ...string) string {
	r.t.Helper()
	body, _ := json.Marshal(map[string]any{"model": "m", "stream": true, "messages": msgs})
	req := httptest.NewRequest(http.MethodPost, "/v1/messages", bytes.NewReader(body))
	if agent != "" {
		req.Header.Set(headerAgentID, agent)
	}
	d := r.m.attribute(req, body)
	r.spanFor(d, in, out, tools...)
	return instrument.InvocationIDFromContext(d.Ctx)
}

func (r *wireRig) spanFor(d wireproxy.Decision, in, out int64, tools ...string) {
	_, s := r.p.tp.Tracer("test").Start(d.Ctx, "chat m")
	s.SetAttributes(attribute.String(contract.AttrOperationName, contract.OpChat),
		attribute.Int64(contract.AttrUsageInputTokens, in), attribute.Int64(contract.AttrUsageOutputTokens, out))
	for _, id := range tools {
		d.OnTool(id)
	}
	s.End()
	d.Done(genaicall.Usage{Input: &in, Output: &out})
}

func user(blocks ...map[string]any) map[string]any {
	return map[string]any{"role": "user", "content": blocks}
}

func text(s string) map[string]any { return map[string]any{"type": "text", "text": s} }

func toolResult(id, content string) map[string]any {
	return map[string]any{"type": "tool_result", "tool_use_id": id, "content": content}
}

var assistant = map[string]any{"role": "assistant", "content": []map[string]any{text("ok")}}

func (r *wireRig) register(text string) *prompt {
	return r.m.register(context.Background(), newUUID(), text)
}

// answer ends prompts with a result line.
func (r *wireRig) answer(ps ...*prompt) {
	var uuids []string
	for _, p := range ps {
		uuids = append(uuids, p.uuid)
	}
	b, _ := json.Marshal(map[string]any{"type": "result", "subtype": "success", "result": "done", "user_message_uuids": uuids})
	r.line(string(b))
}

func (r *wireRig) summary(id string) instrument.Summary {
	r.t.Helper()
	r.m.settled()
	s, ok := r.p.ledger().Summary(id)
	if !ok {
		r.t.Fatalf("no summary of %s", id)
	}
	return s
}

func (r *wireRig) wantFinal(id string, in, out int64) {
	r.t.Helper()
	s := r.summary(id)
	if s.Status != contract.StatusFinal || s.Usage.InputTokens != in || s.Usage.OutputTokens != out {
		r.t.Errorf("%s: %s %v usage %d/%d, want final %d/%d", id, s.Status, s.Reasons, s.Usage.InputTokens, s.Usage.OutputTokens, in, out)
	}
}

func (r *wireRig) wantAmbiguous(id string) {
	r.t.Helper()
	s := r.summary(id)
	if s.Status == contract.StatusFinal || !slices.Contains(s.Reasons, contract.ReasonUsageMissing+":chat ambiguous") {
		r.t.Errorf("%s: %s %v, want it kept from final by the ambiguous request", id, s.Status, s.Reasons)
	}
}

func (r *wireRig) wantUnattributed(id, reason string, others ...string) {
	r.t.Helper()
	if slices.Contains(others, id) || id == "" {
		r.t.Fatalf("request owned by %q, want an unattributed invocation", id)
	}
	for _, s := range r.p.spans("", id) {
		if v := attr(s, contract.AttrUnattributed).AsString(); v != "" && v != reason {
			r.t.Errorf("unattributed reason %q, want %q", v, reason)
		}
	}
	if s := r.summary(id); s.Status != contract.StatusIncomplete {
		r.t.Errorf("unattributed %s: %s", id, s.Status)
	}
}

// TestAttributionByEvidence: each request goes to the invocation its
// content names: the prompt's text, the tool results' owner, the
// notification's job (a continuation).
func TestAttributionByEvidence(t *testing.T) {
	r := newWireRig(t)
	a := r.register("ALPHA: start a job")
	if got := r.call("", []map[string]any{user(text("<system-reminder>x</system-reminder>"), text("ALPHA: start a job"))}, 100, 10, "toolu_a"); got != a.inv.ID() {
		t.Fatalf("prompt request owned by %s, want %s", got, a.inv.ID())
	}
	r.line(`{"type":"assistant","message":{"content":[{"type":"tool_use","id":"toolu_a","name":"Bash"}]}}`)
	r.line(`{"type":"system","subtype":"task_started","task_id":"bjob","run_id":"run1","tool_use_id":"toolu_a","task_type":"local_bash","is_backgrounded":true}`)
	r.line(`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"toolu_a","content":"running in background"}]}}`)
	// A prompt written meanwhile, whose text a tool's output echoes: not
	// evidence.
	b := r.register("BRAVO: later")
	if got := r.call("", []map[string]any{user(text("ALPHA: start a job")), assistant, user(toolResult("toolu_a", "BRAVO: later"))}, 200, 20); got != a.inv.ID() {
		t.Fatalf("tool result request owned by %s, want %s", got, a.inv.ID())
	}
	r.answer(a)
	// The prompt folded into no turn: its own request.
	if got := r.call("", []map[string]any{user(text("BRAVO: later"))}, 300, 30); got != b.inv.ID() {
		t.Fatalf("second prompt owned by %s", got)
	}
	r.answer(b)
	r.wantFinal(b.inv.ID(), 300, 30)
	// The job ends; its notification is the only thing a request carries.
	r.line(`{"type":"system","subtype":"task_notification","task_id":"bjob","run_id":"run1","tool_use_id":"toolu_a","status":"completed"}`)
	note := "<task-notification>\n<task-id>bjob</task-id>\n<status>completed</status>\n</task-notification>"
	if got := r.call("", []map[string]any{user(text("x")), assistant, map[string]any{"role": "system", "content": note}}, 400, 40); got != a.inv.ID() {
		t.Fatalf("notification request owned by %s, want the job's invocation %s", got, a.inv.ID())
	}
	r.line(`{"type":"result","subtype":"success","result":"noted","origin":{"kind":"task-notification","runId":"run1"}}`)
	r.wantFinal(a.inv.ID(), 700, 70)
	if s := r.summary(a.inv.ID()); s.Usage.Continuations != 1 || s.Usage.AfterResultInputTokens != 400 {
		t.Errorf("job's invocation %+v: want one continuation, its request after the result", s.Usage)
	}
}

// TestAttributionAmbiguous: evidence that names two owners, or a stream
// that could not be read up to the request, makes the request an
// unattributed invocation and keeps every candidate from final; never a
// guess.
func TestAttributionAmbiguous(t *testing.T) {
	t.Run("two prompts of one text", func(t *testing.T) {
		r := newWireRig(t)
		a, b := r.register("same words"), r.register("same words")
		got := r.call("", []map[string]any{user(text("same words"))}, 100, 10)
		r.wantUnattributed(got, UnattributedAmbiguous, a.inv.ID(), b.inv.ID())
		r.answer(a, b)
		r.wantAmbiguous(a.inv.ID())
		r.wantAmbiguous(b.inv.ID())
	})
	t.Run("tool results of two invocations", func(t *testing.T) {
		r := newWireRig(t)
		a, b := r.register("ONE"), r.register("TWO")
		r.call("", []map[string]any{user(text("ONE"))}, 1, 1, "toolu_1")
		r.call("", []map[string]any{user(text("TWO"))}, 1, 1, "toolu_2")
		got := r.call("", []map[string]any{user(text("x")), assistant, user(toolResult("toolu_1", "a"), toolResult("toolu_2", "b"))}, 50, 5)
		r.wantUnattributed(got, UnattributedAmbiguous, a.inv.ID(), b.inv.ID())
		r.answer(a, b)
		r.wantAmbiguous(a.inv.ID())
		r.wantAmbiguous(b.inv.ID())
	})
	t.Run("stream not read up to the request", func(t *testing.T) {
		r := newWireRig(t)
		a := r.register("/compact")
		r.line(`{"type":"command_lifecycle","command_uuid":"` + a.uuid + `","state":"started"}`)
		r.synced = false
		got := r.call("", []map[string]any{user(text("x")), assistant, user(text("Summarise the conversation"))}, 70, 7)
		r.wantUnattributed(got, UnattributedAmbiguous, a.inv.ID())
		r.answer(a)
		r.wantAmbiguous(a.inv.ID())
	})
	t.Run("compaction of the running turn", func(t *testing.T) {
		r := newWireRig(t)
		a := r.register("/compact")
		r.line(`{"type":"command_lifecycle","command_uuid":"` + a.uuid + `","state":"started"}`)
		if got := r.call("", []map[string]any{user(text("x")), assistant, user(text("Summarise the conversation"))}, 70, 7); got != a.inv.ID() {
			t.Fatalf("compaction owned by %s, want the /compact prompt's %s", got, a.inv.ID())
		}
		r.answer(a)
		r.wantFinal(a.inv.ID(), 70, 7)
	})
	t.Run("compaction repeating another turn's tool result", func(t *testing.T) {
		// Issue 32, observation 1: A's tool result, repeated in the
		// compaction request next to the instruction, is not evidence.
		r := newWireRig(t)
		a := r.register("A")
		r.call("", []map[string]any{user(text("A"))}, 1, 1, "toolu_a")
		r.call("", []map[string]any{user(text("A")), assistant, user(toolResult("toolu_a", "running in background"))}, 2, 2)
		r.answer(a)
		c := r.register("/compact")
		r.line(`{"type":"command_lifecycle","command_uuid":"` + c.uuid + `","state":"started"}`)
		instruction := compactionPrefix + " Do NOT call any tools.\n\n" + compactionTask + ", paying close attention to the user's requests."
		if got := r.call("", []map[string]any{user(text("A")), assistant, user(toolResult("toolu_a", "running in background"), text(instruction))}, 70, 7); got != c.inv.ID() {
			t.Fatalf("compaction owned by %s, want the /compact prompt's %s (A is %s)", got, c.inv.ID(), a.inv.ID())
		}
		r.answer(c)
		r.wantFinal(c.inv.ID(), 70, 7)
		r.wantFinal(a.inv.ID(), 3, 3)
	})
	t.Run("unknown subagent", func(t *testing.T) {
		r := newWireRig(t)
		a := r.register("A")
		got := r.call("agent-nobody", []map[string]any{user(text("A"))}, 9, 9)
		r.wantUnattributed(got, UnattributedUnknownTask, a.inv.ID())
		r.answer(a)
		r.wantFinal(a.inv.ID(), 0, 0)
	})
	t.Run("subagent request before its task started", func(t *testing.T) {
		r := newWireRig(t)
		a := r.register("DELEGATE")
		r.call("", []map[string]any{user(text("DELEGATE"))}, 10, 1, "toolu_agent")
		r.line(`{"type":"assistant","message":{"content":[{"type":"tool_use","id":"toolu_agent","name":"Agent"}]}}`)
		got := r.call("agent-early", []map[string]any{user(text("sub work"))}, 30, 3)
		r.wantUnattributed(got, UnattributedUnknownTask, a.inv.ID())
		r.line(`{"type":"system","subtype":"task_started","task_id":"agent-early","tool_use_id":"toolu_agent","task_type":"local_agent","is_backgrounded":true}`)
		r.answer(a)
		r.m.exit(false)
		r.wantAmbiguous(a.inv.ID())
	})
	t.Run("notification before its task started", func(t *testing.T) {
		r := newWireRig(t)
		a := r.register("LAUNCH")
		r.call("", []map[string]any{user(text("LAUNCH"))}, 10, 1, "toolu_sh")
		r.line(`{"type":"assistant","message":{"content":[{"type":"tool_use","id":"toolu_sh","name":"Bash"}]}}`)
		got := r.call("", []map[string]any{user(text("x")), assistant, user(text("<task-notification><task-id>bearly</task-id></task-notification>"))}, 40, 4)
		r.wantUnattributed(got, UnattributedUnknownTask, a.inv.ID())
		r.line(`{"type":"system","subtype":"task_started","task_id":"bearly","tool_use_id":"toolu_sh","task_type":"local_bash","is_backgrounded":true}`)
		r.answer(a)
		r.m.exit(false)
		r.wantAmbiguous(a.inv.ID())
	})
	t.Run("nobody's", func(t *testing.T) {
		r := newWireRig(t)
		got := r.call("", []map[string]any{user(text("x")), assistant, user(text("a wakeup"))}, 5, 5)
		r.wantUnattributed(got, UnattributedSelfStarted)
	})
}

// TestUsageCrossCheck: a result whose model_usage_since_last_result
// differs from what the proxy counted marks the turn (usage_mismatch);
// one that agrees does not. Totals are the wire's either way.
func TestUsageCrossCheck(t *testing.T) {
	for _, tc := range []struct {
		name     string
		reported string
		mismatch bool
	}{
		{"agrees", `{"m":{"inputTokens":90,"outputTokens":9,"cacheReadInputTokens":0,"cacheCreationInputTokens":0}}`, false},
		{"differs", `{"m":{"inputTokens":91,"outputTokens":9,"cacheReadInputTokens":0,"cacheCreationInputTokens":0}}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newWireRig(t)
			a := r.register("CHECK")
			r.call("", []map[string]any{user(text("CHECK"))}, 90, 9)
			r.line(`{"type":"result","subtype":"success","result":"ok","user_message_uuids":["` + a.uuid + `"],"model_usage_since_last_result":` + tc.reported + `}`)
			s := r.summary(a.inv.ID())
			var want []string
			if tc.mismatch {
				want = []string{contract.AnomalyUsageMismatch + ":invoke_agent " + DefaultAgent}
			}
			if s.Status != contract.StatusFinal || s.Usage.InputTokens != 90 || !slices.Equal(s.Anomalies, want) {
				t.Errorf("summary %s %v usage %d anomalies %v, want final 90 with %v", s.Status, s.Reasons, s.Usage.InputTokens, s.Anomalies, want)
			}
		})
	}
}

// TestUsageCrossCheckAfterSubagent: the CLI may count a subagent's call
// in the result after the one whose window the proxy saw it end in. That
// window is not compared (no usage_mismatch on A's continuation), the
// next one is again (B's differs and is marked), and the totals are the
// wire's throughout.
func TestUsageCrossCheckAfterSubagent(t *testing.T) {
	usage := func(in int64) string {
		return fmt.Sprintf(`{"m":{"inputTokens":%d,"outputTokens":%d,"cacheReadInputTokens":0,"cacheCreationInputTokens":0}}`, in, in)
	}
	r := newWireRig(t)
	a := r.register("A: delegate")
	r.call("", []map[string]any{user(text("A: delegate"))}, 1, 1, "toolu_agent")
	r.line(`{"type":"assistant","message":{"content":[{"type":"tool_use","id":"toolu_agent","name":"Agent"}]}}`)
	r.line(`{"type":"system","subtype":"task_started","task_id":"sub","run_id":"r1","tool_use_id":"toolu_agent","task_type":"local_agent","is_backgrounded":true}`)
	r.line(`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"toolu_agent","content":"Async agent launched"}]}}`)
	r.call("sub", []map[string]any{user(text("sub task"))}, 2, 2)
	r.call("", []map[string]any{user(text("A: delegate")), assistant, user(toolResult("toolu_agent", "Async agent launched"))}, 4, 4)
	// The CLI leaves the subagent's call (2) out of this window...
	r.line(`{"type":"result","subtype":"success","result":"A launched","user_message_uuids":["` + a.uuid + `"],"model_usage_since_last_result":` + usage(5) + `}`)
	r.line(`{"type":"system","subtype":"task_updated","task_id":"sub","run_id":"r1","patch":{"status":"completed"}}`)
	r.line(`{"type":"system","subtype":"task_notification","task_id":"sub","run_id":"r1","tool_use_id":"toolu_agent","status":"completed"}`)
	note := map[string]any{"role": "system", "content": "<task-notification>\n<task-id>sub</task-id>\n<status>completed</status>\n</task-notification>"}
	r.call("", []map[string]any{user(text("A: delegate")), assistant, note}, 16, 16)
	// ...and counts it in the next: 16 + 2.
	r.line(`{"type":"result","subtype":"success","result":"noted","origin":{"kind":"task-notification","runId":"r1"},"model_usage_since_last_result":` + usage(18) + `}`)
	r.wantFinal(a.inv.ID(), 23, 23)
	if s := r.summary(a.inv.ID()); len(s.Anomalies) != 0 {
		t.Errorf("A's anomalies %v, want none: the window after a subagent's call is not compared", s.Anomalies)
	}
	b := r.register("B: next")
	r.call("", []map[string]any{user(text("B: next"))}, 8, 8)
	r.line(`{"type":"result","subtype":"success","result":"ok","user_message_uuids":["` + b.uuid + `"],"model_usage_since_last_result":` + usage(9) + `}`)
	s := r.summary(b.inv.ID())
	if want := []string{contract.AnomalyUsageMismatch + ":invoke_agent " + DefaultAgent}; s.Usage.InputTokens != 8 || !slices.Equal(s.Anomalies, want) {
		t.Errorf("B usage %d anomalies %v, want 8 with %v: the window after is compared again", s.Usage.InputTokens, s.Anomalies, want)
	}
}

// TestSubagentRerun (issue 32, observation 2): a background subagent's
// own background shell outlives the subagent's run; when it ends, the CLI
// runs the subagent again under the same task id (a new run id) to read
// the shell's notification, and the session then reads the rerun's
// notification. Every request is A's, and A is not final before the last:
// in both orders of the shell's end and the session's reading the first
// run's notification.
func TestSubagentRerun(t *testing.T) {
	note := func(id string) map[string]any {
		return map[string]any{"role": "system", "content": "<task-notification>\n<task-id>" + id + "</task-id>\n<status>completed</status>\n</task-notification>"}
	}
	for _, shellFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("shell ends first %v", shellFirst), func(t *testing.T) {
			r := newWireRig(t)
			a := r.register("A: delegate")
			want := func(got string) {
				t.Helper()
				if got != a.inv.ID() {
					t.Fatalf("request owned by %s, want A's %s", got, a.inv.ID())
				}
			}
			want(r.call("", []map[string]any{user(text("A: delegate"))}, 1, 1, "toolu_agent"))
			r.line(`{"type":"assistant","message":{"content":[{"type":"tool_use","id":"toolu_agent","name":"Agent"}]}}`)
			r.line(`{"type":"system","subtype":"task_started","task_id":"sub","run_id":"r1","tool_use_id":"toolu_agent","task_type":"local_agent","is_backgrounded":true}`)
			r.line(`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"toolu_agent","content":"Async agent launched"}]}}`)
			want(r.call("sub", []map[string]any{user(text("sub task"))}, 2, 2, "toolu_sh"))
			r.line(`{"type":"assistant","parent_tool_use_id":"toolu_agent","message":{"content":[{"type":"tool_use","id":"toolu_sh","name":"Bash"}]}}`)
			want(r.call("", []map[string]any{user(text("A: delegate")), assistant, user(toolResult("toolu_agent", "Async agent launched"))}, 4, 4))
			r.answer(a)
			r.line(`{"type":"system","subtype":"task_started","task_id":"shell","run_id":"rs","tool_use_id":"toolu_sh","parent_task_id":"sub","owned_by_subagent":true,"task_type":"local_bash","is_backgrounded":true}`)
			r.line(`{"type":"user","parent_tool_use_id":"toolu_agent","message":{"content":[{"type":"tool_result","tool_use_id":"toolu_sh","content":"running in background"}]}}`)
			want(r.call("sub", []map[string]any{user(text("sub task")), assistant, user(toolResult("toolu_sh", "running in background"))}, 8, 8))
			r.line(`{"type":"system","subtype":"task_updated","task_id":"sub","run_id":"r1","patch":{"status":"completed"}}`)
			r.line(`{"type":"system","subtype":"task_notification","task_id":"sub","run_id":"r1","tool_use_id":"toolu_agent","status":"completed"}`)
			mainReads := func(in int64, run string) {
				t.Helper()
				want(r.call("", []map[string]any{user(text("A: delegate")), assistant, note("sub")}, in, in))
				r.line(`{"type":"result","subtype":"success","result":"noted","origin":{"kind":"task-notification","runId":"` + run + `"}}`)
			}
			shellEnds := func() {
				r.line(`{"type":"system","subtype":"task_updated","task_id":"shell","run_id":"rs","patch":{"status":"completed"}}`)
				r.line(`{"type":"system","subtype":"task_notification","task_id":"shell","run_id":"rs","tool_use_id":"toolu_sh","status":"completed"}`)
				r.line(`{"type":"system","subtype":"task_started","task_id":"sub","run_id":"r2","tool_use_id":"toolu_agent","task_type":"local_agent","is_backgrounded":true}`)
				want(r.call("sub", []map[string]any{user(text("sub task")), assistant, note("shell")}, 32, 32))
				r.line(`{"type":"system","subtype":"task_updated","task_id":"sub","run_id":"r2","patch":{"status":"completed"}}`)
				r.line(`{"type":"system","subtype":"task_notification","task_id":"sub","run_id":"r2","tool_use_id":"toolu_agent","status":"completed"}`)
			}
			if shellFirst {
				shellEnds()
				mainReads(16, "r1")
			} else {
				mainReads(16, "r1")
				if s := r.summary(a.inv.ID()); s.Status == contract.StatusFinal {
					t.Fatalf("A final while its subagent's shell runs: %+v", s)
				}
				shellEnds()
			}
			if s := r.summary(a.inv.ID()); s.Status == contract.StatusFinal {
				t.Fatalf("A final before the session read the rerun's notification: %+v", s)
			}
			mainReads(64, "r2")
			r.wantFinal(a.inv.ID(), 127, 127)
			if s := r.summary(a.inv.ID()); s.Usage.BackgroundJobs != 3 {
				t.Errorf("jobs %d, want 3 (the subagent's two runs, its shell)", s.Usage.BackgroundJobs)
			}
		})
	}
}
