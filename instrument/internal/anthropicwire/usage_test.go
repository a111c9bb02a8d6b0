package anthropicwire

import (
	"math"
	"testing"

	"github.com/agentledger/agentledger/instrument/internal/genaicall"
)

// The two conversions invert each other: what the parser counts as GenAI
// input, FromGenAI turns back into Anthropic's input_tokens.
func TestUsageConversionsInvert(t *testing.T) {
	p := func(v int64) *int64 { return &v }
	for _, raw := range []Usage{{}, {Input: 7, Output: 3}, {Input: 10, CacheRead: 400, CacheCreation: 25, Output: 9}} {
		g := genaicall.Usage{Input: genAIInput(raw.Input, p(raw.CacheRead), p(raw.CacheCreation)),
			CacheRead: p(raw.CacheRead), CacheCreation: p(raw.CacheCreation), Output: p(raw.Output)}
		if got, ok := FromGenAI(g); !ok || got != raw {
			t.Errorf("FromGenAI(genAIInput(%+v)) = %+v, %v", raw, got, ok)
		}
	}
	if _, ok := FromGenAI(genaicall.Usage{Output: p(1)}); ok {
		t.Error("FromGenAI without input: ok")
	}
	if got := genAIInput(math.MaxInt64, p(1)); got != nil {
		t.Errorf("genAIInput beyond int64 = %d, want nil", *got)
	}
}
