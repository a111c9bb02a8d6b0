package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"context"
	"slices"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
)

// indexRef is one span of the batch routed to a shard.
type indexRef struct {
	shard int
	id    string // the ledger key: tenant and invocation id (ledgerKey)
	span  ptrace.Span
	res   pcommon.Resource
}

// route finds the batch's member spans, each with its ledger key (its
// tenant and invocation.id) and shard, and counts the spans it refuses:
// summaries from untrusted collectors and spans without a tenant.
func (p *invocationProcessor) route(ctx context.Context, td ptrace.Traces) (refs []indexRef, refusedSpans refused) {
	req := p.tenants.ofRequest(ctx)
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		tenant, tenantOK := p.tenants.of(req, rs.Resource())
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			spans := sss.At(j).Spans()
			for k := 0; k < spans.Len(); k++ {
				sp := spans.At(k)
				if sp.Name() == contract.SpanNameSummary {
					// Never a member. Passed on only from a trusted
					// collector (a second tier), else dropped below.
					if !p.trust.accepts(sss.At(j).Scope(), rs.Resource()) {
						refusedSpans.summaries++
					}
					continue
				}
				v, ok := sp.Attributes().Get(contract.AttrInvocationID)
				if !ok || v.Type() != pcommon.ValueTypeStr || v.Str() == "" {
					continue
				}
				if !tenantOK {
					refusedSpans.withoutTenant++
					continue
				}
				key := ledgerKey(tenant, v.Str())
				if refs == nil {
					refs = make([]indexRef, 0, td.SpanCount())
				}
				refs = append(refs, indexRef{shard: p.shardOf(key), id: key, span: sp, res: rs.Resource()})
			}
		}
	}
	return refs, refusedSpans
}

// shardOf routes an invocation (its ledger key) to a shard.
func (p *invocationProcessor) shardOf(id string) int {
	// FNV-1a, inline so routing allocates nothing.
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	return int(h % uint64(len(p.shards)))
}

// groupByShard orders refs by shard with a counting sort, keeping batch
// order within a shard, and returns one slice per shard present.
func (p *invocationProcessor) groupByShard(refs []indexRef) [][]indexRef {
	first := refs[0].shard
	same := true
	for i := range refs {
		if refs[i].shard != first {
			same = false
			break
		}
	}
	if same {
		return [][]indexRef{refs}
	}
	counts := make([]int, len(p.shards)+1)
	for i := range refs {
		counts[refs[i].shard+1]++
	}
	groups := make([][]indexRef, 0, len(p.shards))
	for i := 1; i < len(counts); i++ {
		counts[i] += counts[i-1]
	}
	sorted := make([]indexRef, len(refs))
	next := slices.Clone(counts[:len(p.shards)])
	for i := range refs {
		sh := refs[i].shard
		sorted[next[sh]] = refs[i]
		next[sh]++
	}
	for sh := range p.shards {
		if counts[sh+1] > counts[sh] {
			groups = append(groups, sorted[counts[sh]:counts[sh+1]])
		}
	}
	return groups
}
