package genaitest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// Balance is the check every runtime adapter's end-to-end tests make:
// nothing was lost and nothing counted twice. The usage of every request
// the scripted model answered (answered, since its rules were last set)
// must equal the sum over every invocation of the sessions in the ledger
// (the prompts', with their continuations, and the unattributed turns'),
// each of them closed. The invocations are those of the spans (ended,
// from the test's recorder) carrying gen_ai.conversation.id of one of
// the sessions; their ids are returned, for the collector comparison.
// seed is printed on failure, to repeat the run's random usage.
func Balance(t testing.TB, answered []scriptedmodel.Answered, ledger *instrument.Ledger, spans []sdktrace.ReadOnlySpan, seed uint64, sessions ...string) []string {
	t.Helper()
	var model scriptedmodel.Usage
	var labels []string
	for _, a := range answered {
		model.InputTokens += a.Usage.InputTokens
		model.OutputTokens += a.Usage.OutputTokens
		model.CacheReadTokens += a.Usage.CacheReadTokens
		model.CacheCreationTokens += a.Usage.CacheCreationTokens
		model.ReasoningTokens += a.Usage.ReasoningTokens
		labels = append(labels, fmt.Sprintf("%d:%s", a.Seq, a.Rule))
	}
	var ids []string
	for _, s := range spans {
		var session, id string
		for _, kv := range s.Attributes() {
			switch string(kv.Key) {
			case contract.AttrConversationID:
				session = kv.Value.AsString()
			case contract.AttrInvocationID:
				id = kv.Value.AsString()
			}
		}
		if id != "" && slices.Contains(sessions, session) && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	var got instrument.Usage
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		sum, err := ledger.Wait(ctx, id)
		cancel()
		if err != nil {
			t.Errorf("balance: invocation %s not closed: %v (%+v)", id, err, sum)
			continue
		}
		u := sum.Usage
		got.InputTokens += u.InputTokens
		got.OutputTokens += u.OutputTokens
		got.CacheReadInputTokens += u.CacheReadInputTokens
		got.CacheCreationInputTokens += u.CacheCreationInputTokens
		got.ReasoningOutputTokens += u.ReasoningOutputTokens
	}
	g := []int64{got.InputTokens, got.OutputTokens, got.CacheReadInputTokens, got.CacheCreationInputTokens, got.ReasoningOutputTokens}
	w := []int64{int64(model.InputTokens), int64(model.OutputTokens), int64(model.CacheReadTokens), int64(model.CacheCreationTokens), int64(model.ReasoningTokens)}
	if fmt.Sprint(g) != fmt.Sprint(w) {
		t.Errorf("balance over %d invocations [in out cache_read cache_creation reasoning]: ledger %v, model answered %v (requests %v, usage seed %d)",
			len(ids), g, w, labels, seed)
	}
	return ids
}
