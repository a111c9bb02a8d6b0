package otelopencode

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument/internal/genaireg"
)

func TestProviderName(t *testing.T) {
	for _, c := range []struct{ id, want string }{
		{"openai", "openai"},
		{"anthropic", "anthropic"},
		{"google", "gcp.gemini"},
		{"google-vertex", "gcp.vertex_ai"},
		{"google-vertex-anthropic", "gcp.vertex_ai"},
		{"amazon-bedrock", "aws.bedrock"},
		{"azure", "azure.ai.openai"},
		{"azure-cognitive-services", "azure.ai.openai"},
		{"mistral", "mistral_ai"},
		{"xai", "x_ai"},
		{"deepseek", "deepseek"},
		{"groq", "groq"},
		{"perplexity", "perplexity"},
		{"cohere", "cohere"},
		{"watsonx", "ibm.watsonx.ai"},
		// Providers the registry does not list keep OpenCode's id.
		{"openrouter", "openrouter"},
		{"github-copilot", "github-copilot"},
		{"opencode", "opencode"},
		{"my-gateway", "my-gateway"},
		{"", ""},
	} {
		if got := providerName(c.id); got != c.want {
			t.Errorf("providerName(%q) = %q, want %q", c.id, got, c.want)
		}
	}
}

// callFrom is script.call with the provider id of the model.
func (s *script) callFrom(provider, session, id, parent string, input, output int64) {
	created := s.now()
	s.send(`{"type":"message.updated","properties":{"sessionID":%q,"info":{"id":%q,"sessionID":%q,"role":"assistant","parentID":%q,"modelID":"m","providerID":%q,"agent":"build","time":{"created":%d}}}}`,
		session, id, session, parent, provider, created)
	s.send(`{"type":"message.updated","properties":{"sessionID":%q,"info":{"id":%q,"sessionID":%q,"role":"assistant","parentID":%q,"modelID":"m","providerID":%q,"agent":"build","finish":"stop","tokens":{"input":%d,"output":%d,"reasoning":0,"cache":{"read":0,"write":0}},"time":{"created":%d,"completed":%d}}}}`,
		session, id, session, parent, provider, input, output, created, s.now())
}

// The invoke_agent spans (the prompt's root, a continuation, an
// unattributed turn) carry the registry's gen_ai.provider.name of their
// turn's model calls; model calls carry it and OpenCode's id; a job span
// carries none; no span has a gen_ai name outside the registry.
func TestProviderOnAgentSpans(t *testing.T) {
	p := newPipeline(t)
	s := &script{t: t, m: p.mapper(), ms: 1_000_000}
	s.session("ses_A", "")
	ctx1, inv1 := p.tracker.StartInvocation(context.Background(), "build", "ses_A")
	s.m.registerPrompt("ses_A", "msg_01", "", ctx1)
	s.user("ses_A", "msg_01")
	created := s.now()
	s.send(`{"type":"message.updated","properties":{"sessionID":"ses_A","info":{"id":"msg_02","sessionID":"ses_A","role":"assistant","parentID":"msg_01","modelID":"m","providerID":"amazon-bedrock","agent":"build","time":{"created":%d}}}}`, created)
	s.send(`{"type":"message.part.updated","properties":{"sessionID":"ses_A","part":{"type":"tool","tool":"bash","callID":"call_1","state":{"status":"completed","input":{"command":"make test","run_in_background":true},"metadata":{"jobId":"bash_7"},"time":{"start":%d,"end":%d}},"id":"prt_1","sessionID":"ses_A","messageID":"msg_02"}}}`, s.now(), s.now())
	s.send(`{"type":"message.updated","properties":{"sessionID":"ses_A","info":{"id":"msg_02","sessionID":"ses_A","role":"assistant","parentID":"msg_01","modelID":"m","providerID":"amazon-bedrock","agent":"build","tokens":{"input":10,"output":1,"reasoning":0,"cache":{"read":0,"write":0}},"time":{"created":%d,"completed":%d}}}}`, created, s.now())
	s.idle("ses_A")
	s.m.promptDone("ses_A", "msg_01")
	s.end(inv1)
	s.notification("ses_A", "msg_03", "bash_7")
	s.callFrom("google-vertex-anthropic", "ses_A", "msg_04", "msg_03", 20, 2)
	s.idle("ses_A")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if sum, err := p.sp.Ledger().Wait(ctx, inv1.ID()); err != nil || sum.Status != contract.StatusFinal {
		t.Fatalf("%v %+v", err, sum)
	}
	// Another client's prompt: an unattributed turn.
	s.user("ses_A", "msg_05")
	s.callFrom("openrouter", "ses_A", "msg_06", "msg_05", 5, 1)
	s.idle("ses_A")

	want := func(sp sdktrace.ReadOnlySpan, provider string) {
		t.Helper()
		if got := attr(sp, contract.AttrProviderName).AsString(); got != provider {
			t.Errorf("%s: gen_ai.provider.name = %q, want %q", sp.Name(), got, provider)
		}
	}
	var roots, unattributed []sdktrace.ReadOnlySpan
	for _, sp := range spansNamed(p, "invoke_agent build") {
		if attr(sp, contract.AttrUnattributed).AsString() != "" {
			unattributed = append(unattributed, sp)
		} else {
			roots = append(roots, sp)
		}
	}
	conts := spansNamed(p, "continue_agent build")
	jobs := spansNamed(p, "background shell")
	if len(roots) != 1 || len(unattributed) != 1 || len(conts) != 1 || len(jobs) != 1 {
		t.Fatalf("roots %d, unattributed %d, continuations %d, jobs %d", len(roots), len(unattributed), len(conts), len(jobs))
	}
	want(roots[0], "aws.bedrock")
	want(conts[0], "gcp.vertex_ai")
	want(unattributed[0], "openrouter")
	want(jobs[0], "")
	chats := map[string]string{}
	for _, sp := range spansNamed(p, "chat m") {
		chats[attr(sp, AttrMessageID).AsString()] = attr(sp, contract.AttrProviderName).AsString() + " " + attr(sp, AttrProviderID).AsString()
	}
	for id, w := range map[string]string{"msg_02": "aws.bedrock amazon-bedrock", "msg_04": "gcp.vertex_ai google-vertex-anthropic", "msg_06": "openrouter openrouter"} {
		if chats[id] != w {
			t.Errorf("chat %s: provider name and id %q, want %q", id, chats[id], w)
		}
	}
	for _, sp := range p.rec.Ended() {
		genaireg.WantRegistered(t, sp)
	}
}
