package instrument

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument/internal/ledger"
)

// Invocation is one caller request into a session; its root span ends
// when the caller receives the result.
type Invocation struct {
	id   string
	span trace.Span
}

// StartInvocation starts a new invocation of agent in session: a root span
// "invoke_agent {agent}" and a fresh invocation id in the returned
// context's baggage. Call End when the caller receives its result.
//
// When the sampler does not sample the root, neither the ledger nor the
// collector can observe the invocation: Ledger.Wait then answers at once,
// incomplete with reason not_sampled (contract.ReasonNotSampled).
func (t *Tracker) StartInvocation(ctx context.Context, agent, session string) (context.Context, *Invocation) {
	return t.startRoot(ctx, agent, session)
}

// UnattributedReason says why a turn is unattributed: the value of
// contract.AttrUnattributed and the detail of its
// "unattributed_wakeup:<reason>" reason. Each adapter names its own (for
// example otelopencode.UnattributedUnknownTask).
type UnattributedReason string

// UnattributedUnknown is the reason StartUnattributed records when it is
// given none.
const UnattributedUnknown UnattributedReason = "unknown"

// StartUnattributed starts a turn the runtime started by itself that no
// invocation can own (contract rule 7): the notification of a job no
// adapter saw, a turn started while the adapter was detached. reason says
// why (for example "unknown_task"; UnattributedUnknown when empty). The
// turn is an invocation of its own: a root span "invoke_agent {agent}",
// the root of a new trace, with contract.AttrUnattributed = reason and a
// fresh invocation id in the returned context's baggage. Spans started
// from the context are its members and their usage is summed as usual,
// but the ledger closes it incomplete with
// "unattributed_wakeup:<reason>", never final, and Ledger.Session says the
// session owes work until End is called. Like StartContinuation it exports
// the turn's wake span at once.
func (t *Tracker) StartUnattributed(ctx context.Context, agent, session string, reason UnattributedReason) (context.Context, *Invocation) {
	if reason == "" {
		reason = UnattributedUnknown
	}
	ctx, inv := t.startRoot(ctx, agent, session, trace.WithNewRoot(),
		trace.WithAttributes(attribute.String(contract.AttrUnattributed, string(reason))))
	return t.wake(ctx, agent, session), inv
}

// StartInvocationWithID starts an invocation as StartInvocation does, but
// with id as its invocation id instead of a fresh one: the runtime's own
// id of the prompt (a Claude Code user message's uuid, an OpenCode
// message id), so that a host asks the collector about the invocation by
// the id it already has. id must name this invocation only (within its
// tenant): a second root with the same id joins the first invocation,
// which the ledger then closes incomplete. It fails, starting nothing,
// when id is empty or not a valid baggage value.
func (t *Tracker) StartInvocationWithID(ctx context.Context, id, agent, session string) (context.Context, *Invocation, error) {
	if id == "" {
		return ctx, nil, errors.New("instrument: empty invocation id")
	}
	ctx, err := ContextWithInvocation(ctx, id)
	if err != nil {
		return ctx, nil, err
	}
	ctx, inv := t.startRootIn(ctx, id, agent, session)
	return ctx, inv, nil
}

// startRoot starts the root span of a new invocation.
func (t *Tracker) startRoot(ctx context.Context, agent, session string, extra ...trace.SpanStartOption) (context.Context, *Invocation) {
	id := NewInvocationID()
	ctx, err := ContextWithInvocation(ctx, id)
	if err != nil {
		// A hex id is always a valid baggage value.
		panic(err)
	}
	return t.startRootIn(ctx, id, agent, session, extra...)
}

// startRootIn starts the root span of invocation id, whose id ctx's
// baggage holds.
func (t *Tracker) startRootIn(ctx context.Context, id, agent, session string, extra ...trace.SpanStartOption) (context.Context, *Invocation) {
	rs := &rootStart{lcc: lifecycleCtx{Context: ctx, lc: lifecycle{contract.RoleRoot, session}}}
	rs.attrs = [...]attribute.KeyValue{
		attribute.String(contract.AttrInvocationID, id),
		attribute.String(contract.AttrRole, contract.RoleRoot),
		attribute.String(contract.AttrOperationName, contract.OpInvokeAgent),
		attribute.String(contract.AttrAgentName, agent),
		attribute.String(contract.AttrConversationID, session),
	}
	opts := append(rs.opts[:0], spanKindInternal, trace.WithAttributes(rs.attrs[:]...))
	opts = append(opts, extra...)
	ctx, span := t.startFrom(&rs.lcc, t.rootName(agent), opts...)
	if !span.SpanContext().IsSampled() {
		// Nothing of the invocation is observed: Ledger.Wait answers
		// not_sampled at once instead of waiting for the open timeout.
		ledger.MarkNotSampled(id)
	}
	rs.inv = Invocation{id: id, span: span}
	return ctx, &rs.inv
}

// rootStart is what starting a root needs, in one allocation instead of
// five: the Invocation returned, the context the root starts from, its
// attributes (the SDK copies them) and its options (two of the Tracker's
// and StartUnattributed's two).
type rootStart struct {
	inv   Invocation
	lcc   lifecycleCtx
	attrs [5]attribute.KeyValue
	opts  [4]trace.SpanStartOption
}

// spanKindInternal is the span kind of lifecycle spans, made once: the
// option is a closure, which would otherwise cost an allocation per span.
var spanKindInternal = trace.WithSpanKind(trace.SpanKindInternal)

// rootName returns the root span name of agent.
func (t *Tracker) rootName(agent string) string {
	if name, ok := t.rootNames.Load(agent); ok {
		return name.(string)
	}
	name := contract.SpanNameRootPrefix + " " + agent
	if t.rootNamesLen.Add(1) <= maxRootNames {
		t.rootNames.Store(agent, name)
	}
	return name
}

// ID returns the invocation id.
func (i *Invocation) ID() string { return i.id }

// Span returns the root span.
func (i *Invocation) Span() trace.Span { return i.span }

// End ends the root span: the caller has its result.
func (i *Invocation) End(opts ...trace.SpanEndOption) { i.span.End(opts...) }
