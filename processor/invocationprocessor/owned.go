package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"context"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/xpdata/pref"
)

// consumeOwned hands td to the next consumer as data the pipeline owns,
// as the collector does for what a receiver hands in. Summaries and the
// filtered copy of a batch are made here, owned by no one: with the
// collector's alpha pdata.useProtoPooling feature gate, the first exporter
// of a fanout would otherwise take them as its own and return them to the
// pool when it is done, while the next exporter still reads them (a crash
// under load at v0.161.0). Marked here, they are released once every
// consumer has let go. Without the gate marking releases nothing. The
// caller's own batch is not handed on through here: the pipeline owns it
// already, and a caller outside a pipeline (a benchmark reusing batches)
// keeps it.
func (p *invocationProcessor) consumeOwned(ctx context.Context, td ptrace.Traces) error {
	if pref.MarkPipelineOwnedTraces(td) {
		defer pref.UnrefTraces(td)
	}
	return p.next.ConsumeTraces(ctx, td)
}
