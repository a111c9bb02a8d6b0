package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"context"
	"slices"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
)

// indexRef is one member span of the batch routed to a shard.
type indexRef struct {
	shard int
	id    string     // the ledger key: tenant and invocation id (ledgerKey)
	facts *spanFacts // what the ledger reads of the span, read outside the lock
	span  ptrace.Span
	res   pcommon.Resource
	// stored is the span's facts and resource as the journal stores
	// them, encoded before any shard's lock (storage.go, encodeFacts);
	// nil without storage.
	stored *storedFact
}

// batchScratch holds one ConsumeTraces call's routing state; its slices
// are reused from call to call through the processor's pool.
type batchScratch struct {
	facts   []spanFacts
	refs    []indexRef
	sorted  []indexRef
	counts  []int
	groups  [][]indexRef
	touched []*shard
	// stored and storedBytes are encodeFacts': one entry per ref, and the
	// bytes they point into.
	stored      []storedFact
	storedBytes []byte
	// parts and all are flushAfterBatch's.
	parts []taken
	all   []summary.Summary
}

func (p *invocationProcessor) getScratch() *batchScratch {
	if b, ok := p.scratch.Get().(*batchScratch); ok {
		return b
	}
	return &batchScratch{}
}

// putScratch returns b to the pool without the references it held into
// the batch, its spans and summaries. Only what was used is cleared: the
// slices' lengths are what the call used.
func (p *invocationProcessor) putScratch(b *batchScratch) {
	clear(b.facts)
	clear(b.refs)
	clear(b.sorted)
	clear(b.groups)
	clear(b.touched)
	clear(b.parts)
	clear(b.all)
	clear(b.stored)
	b.stored = b.stored[:0]
	if cap(b.storedBytes) > maxPooledStoredBytes {
		b.storedBytes = nil
	}
	b.storedBytes = b.storedBytes[:0]
	b.facts, b.refs, b.sorted, b.groups = b.facts[:0], b.refs[:0], b.sorted[:0], b.groups[:0]
	b.touched, b.parts, b.all = b.touched[:0], b.parts[:0], b.all[:0]
	p.scratch.Put(b)
}

// route finds the batch's member spans, reads each one's facts, and
// puts them in b.refs with their ledger key (tenant and invocation.id)
// and shard. It counts the spans it refuses: summaries from untrusted
// collectors and spans without a tenant.
func (p *invocationProcessor) route(ctx context.Context, td ptrace.Traces, b *batchScratch) (refusedSpans refused) {
	req := p.tenants.ofRequest(ctx)
	rss := td.ResourceSpans()
	if n := td.SpanCount(); cap(b.facts) < n {
		// Sized once: refs point into it.
		b.facts = make([]spanFacts, 0, n)
	}
	facts := b.facts[:cap(b.facts)]
	used := 0
	defer func() {
		// A slot past the last member may hold a non-member's facts.
		clear(facts[used:min(used+1, len(facts))])
		b.facts = facts[:used]
	}()
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
				f := &facts[used]
				readFacts(f, sp, &p.rules)
				if f.InvocationID == "" {
					continue
				}
				if !tenantOK {
					refusedSpans.withoutTenant++
					continue
				}
				if len(f.InvocationID) > p.limits.idBytes {
					// Not indexed under a shortened id: its invocation
					// gets no summary, so it is never reported final.
					refusedSpans.idTooLong++
					continue
				}
				refusedSpans.namesCut += p.limits.capNames(f, &p.rules)
				used++
				key := ledgerKey(tenant, f.InvocationID)
				b.refs = append(b.refs, indexRef{shard: p.shardOf(key), id: key, facts: f, span: sp, res: rs.Resource()})
			}
		}
	}
	return refusedSpans
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

// groupByShard orders b.refs by shard with a counting sort, keeping batch
// order within a shard, and puts one slice per shard present in b.groups.
func (p *invocationProcessor) groupByShard(b *batchScratch) {
	refs := b.refs
	first := refs[0].shard
	same := true
	for i := range refs {
		if refs[i].shard != first {
			same = false
			break
		}
	}
	if same {
		b.groups = append(b.groups[:0], refs)
		return
	}
	counts := slices.Grow(b.counts[:0], len(p.shards)+1)[:len(p.shards)+1]
	clear(counts)
	for i := range refs {
		counts[refs[i].shard+1]++
	}
	for i := 1; i < len(counts); i++ {
		counts[i] += counts[i-1]
	}
	// counts[sh] is where shard sh's refs start; it moves along as they
	// are placed.
	sorted := slices.Grow(b.sorted[:0], len(refs))[:len(refs)]
	for i := range refs {
		sh := refs[i].shard
		sorted[counts[sh]] = refs[i]
		counts[sh]++
	}
	// counts[sh] is now where shard sh's refs end.
	groups := b.groups[:0]
	start := 0
	for sh := range p.shards {
		if counts[sh] > start {
			groups = append(groups, sorted[start:counts[sh]])
		}
		start = counts[sh]
	}
	b.counts, b.sorted, b.groups = counts, sorted, groups
}
