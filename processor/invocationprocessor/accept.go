package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"context"
	"fmt"

	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"
)

// What the processor accepts (CONTRACT.md): every value of a member span
// that the journal stores (its invocation.* and gen_ai.* attributes, its
// links' invocation.* attributes, its resource's attributes) is stored and
// read back as it came, or the batch is refused before it is
// acknowledged. The one limit is journal.MaxValueDepth; it holds with and
// without storage, so a pipeline behaves the same when storage is added.

// refusedValueDepth is the refused_spans reason of a value nested deeper
// than journal.MaxValueDepth.
const refusedValueDepth = "value_depth"

var refusedValueDepthAttr = metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", refusedValueDepth)))

// unstorable names the first value of a batch the journal cannot store.
type unstorable struct {
	where string // "resource attribute", "span attribute", "link attribute"
	key   string
	span  pcommon.SpanID
	id    string // the invocation.id
}

func (u *unstorable) Error() string {
	return fmt.Sprintf("%s %q of span %s (invocation.id %q) is nested deeper than %d levels of slices and maps, "+
		"the most the invocation processor stores; the batch is refused (CONTRACT.md, What the processor accepts)",
		u.where, u.key, u.span, u.id, journal.MaxValueDepth)
}

// findUnstorable returns the first value among the batch's member spans
// (b.refs) that the journal could not store, or nil.
func findUnstorable(b *batchScratch) *unstorable {
	var checked pcommon.Resource
	for i := range b.refs {
		r := &b.refs[i]
		if i == 0 || r.res != checked {
			checked = r.res
			if k, _, deep := journal.TooDeep(r.res.Attributes(), nil); deep {
				return &unstorable{where: "resource attribute", key: k, span: r.span.SpanID(), id: r.facts.InvocationID}
			}
		}
		if k, _, deep := journal.TooDeep(r.span.Attributes(), journal.FactAttr); deep {
			return &unstorable{where: "span attribute", key: k, span: r.span.SpanID(), id: r.facts.InvocationID}
		}
		links := r.span.Links()
		for j := 0; j < links.Len(); j++ {
			if k, _, deep := journal.TooDeep(links.At(j).Attributes(), journal.LinkAttr); deep {
				return &unstorable{where: "link attribute", key: k, span: r.span.SpanID(), id: r.facts.InvocationID}
			}
		}
	}
	return nil
}

// refuseUnstorable refuses the batch, before anything of it is indexed or
// acknowledged, when the journal could not store one of its member spans
// as it came: a permanent error naming the attribute (a retry would be
// refused again), counted in refused_spans and logged (rate-limited).
func (p *invocationProcessor) refuseUnstorable(ctx context.Context, b *batchScratch, spans int, now int64) error {
	u := findUnstorable(b)
	if u == nil {
		return nil
	}
	p.tel.ProcessorInvocationRefusedSpans.Add(context.WithoutCancel(ctx), int64(spans), refusedValueDepthAttr)
	p.warnUnstorable.note(p.logger, now, int64(spans), zap.String("reason", refusedValueDepth), zap.String("first", u.Error()))
	return consumererror.NewPermanent(fmt.Errorf("invocation processor: %w", u))
}
