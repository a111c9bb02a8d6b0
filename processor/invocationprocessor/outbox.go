package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"context"
	"fmt"

	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.uber.org/zap"

	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
)

// outboxSlack is how many summaries beyond a shard's share of
// max_open_invocations may wait for a slow or failing next consumer before
// the oldest are dropped (counted as bound summary_outbox).
const outboxSlack = 1024

// flushMode says who sends a shard's outbox, and so how it waits.
type flushMode uint8

const (
	// flushAfterBatch: after a batch passed through. Leaves the summaries to
	// a goroutine already sending, and to the timer goroutine after a
	// failed send, so a failing next consumer is not handed the whole
	// outbox again with every batch.
	flushAfterBatch flushMode = iota
	// flushFromTimer: the timer goroutine, which retries after a failure.
	flushFromTimer
	// flushAtShutdown: waits for a goroutine already sending, and returns
	// at ctx's end even if the next consumer ignores it.
	flushAtShutdown
)

// flush sends the shard's outbox to the next consumer. One goroutine at a
// time sends a shard's summaries, so they arrive in the order they were
// made (a pending never after its final). A refused batch goes back to the
// front of the outbox for the timer goroutine to retry, unless the error
// is permanent or the processor is shutting down. The error is for
// logging: a summary is never the caller's batch, so it is never returned
// from ConsumeTraces.
func (p *invocationProcessor) flush(ctx context.Context, s *shard, mode flushMode) error {
	for {
		if mode == flushAtShutdown {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("invocation summaries not sent: %w", err)
			}
			select {
			case s.sending <- struct{}{}:
			case <-ctx.Done():
				return fmt.Errorf("waiting for the invocation summary sender: %w", ctx.Err())
			}
		} else {
			select {
			case s.sending <- struct{}{}:
			default:
				return nil // the goroutine sending takes these summaries too
			}
		}
		s.mu.Lock()
		var out []summary.Summary
		if mode != flushAfterBatch || !s.sendFailed {
			out, s.outbox = s.outbox, nil
		}
		s.mu.Unlock()
		if len(out) == 0 {
			<-s.sending
			// Summaries added while this goroutine held the semaphore, by one
			// that then gave up, must not wait for the next batch.
			s.mu.Lock()
			done := len(s.outbox) == 0 || (mode == flushAfterBatch && s.sendFailed)
			s.mu.Unlock()
			if done {
				return nil
			}
			continue
		}
		td := summary.Build(out, p.trust.mark)
		var err error
		if mode == flushAtShutdown {
			err = p.sendWithin(ctx, s, td) // releases the semaphore itself
		} else {
			err = p.consumeOwned(ctx, td)
			<-s.sending
		}
		if err != nil {
			p.tel.ProcessorInvocationSummarySendFailures.Add(context.WithoutCancel(ctx), 1)
			if mode != flushAtShutdown && !consumererror.IsPermanent(err) {
				first, dropped := s.putBack(out)
				p.warnRefused(ctx, err, first, dropped)
			}
			return fmt.Errorf("sending %d invocation summaries: %w", len(out), err)
		}
		s.mu.Lock()
		s.sendFailed = false
		s.mu.Unlock()
		s.journal.sent(s, out)
		p.countSent(ctx, out)
	}
}

// sendWithin sends td from a goroutine of its own and returns when it is
// sent or ctx ends, whichever is first: a next consumer that ignores its
// context cannot hold Shutdown past its deadline. The goroutine releases
// the shard's semaphore when the send is over.
func (p *invocationProcessor) sendWithin(ctx context.Context, s *shard, td ptrace.Traces) error {
	result := make(chan error, 1)
	go func() {
		err := p.consumeOwned(ctx, td)
		<-s.sending
		result <- err
	}()
	select {
	case err := <-result:
		return err
	case <-ctx.Done():
		return fmt.Errorf("next consumer still busy at the deadline: %w", ctx.Err())
	}
}

// taken is the part of one shard's outbox in a batched send.
type taken struct {
	shard *shard
	out   []summary.Summary
}

// flushAfterBatch sends the outboxes of the shards a batch touched as one
// batch of summaries: one downstream call per ConsumeTraces instead of one
// per shard, the resources shared (buildTraces). It holds the sending
// semaphore of every shard whose summaries it sends, so each shard's
// summaries still arrive in the order they were made; a shard whose
// semaphore is held elsewhere is left to that sender, and one whose last
// send failed to the timer goroutine, as flush does with flushAfterBatch.
func (p *invocationProcessor) flushAfterBatch(ctx context.Context, b *batchScratch) error {
	shards := b.touched
	if len(shards) == 1 {
		return p.flush(ctx, shards[0], flushAfterBatch)
	}
	parts, all := b.parts, b.all
	defer func() { b.parts, b.all = parts, all }() // kept for the next batch
	for {
		clear(parts)
		clear(all)
		parts, all = parts[:0], all[:0]
		// more is set when a shard has summaries again after this
		// goroutine held its semaphore: one that gave up while it was held
		// added them, and they must not wait for the next batch.
		more := false
		for _, s := range shards {
			select {
			case s.sending <- struct{}{}:
			default:
				continue // the goroutine sending takes these summaries too
			}
			s.mu.Lock()
			var out []summary.Summary
			if !s.sendFailed {
				out, s.outbox = s.outbox, nil
			}
			s.mu.Unlock()
			if len(out) == 0 {
				<-s.sending
				more = more || s.hasUnsent()
				continue
			}
			parts = append(parts, taken{shard: s, out: out})
			all = append(all, out...)
		}
		if len(parts) == 0 {
			if more {
				continue
			}
			return nil
		}
		err := p.consumeOwned(ctx, summary.Build(all, p.trust.mark))
		for _, t := range parts {
			<-t.shard.sending
		}
		if err != nil {
			p.tel.ProcessorInvocationSummarySendFailures.Add(context.WithoutCancel(ctx), 1)
			if !consumererror.IsPermanent(err) {
				var dropped int64
				first := false
				for _, t := range parts {
					f, d := t.shard.putBack(t.out)
					first, dropped = first || f, dropped+d
				}
				p.warnRefused(ctx, err, first, dropped)
			}
			return fmt.Errorf("sending %d invocation summaries: %w", len(all), err)
		}
		p.countSent(ctx, all)
		for _, t := range parts {
			t.shard.journal.sent(t.shard, t.out)
			clear(t.out)
			t.shard.mu.Lock()
			t.shard.sendFailed = false
			if t.shard.outbox == nil {
				t.shard.outbox = t.out[:0] // reused for the next summaries
			}
			t.shard.mu.Unlock()
		}
		for _, t := range parts {
			more = more || t.shard.hasUnsent()
		}
		if !more {
			return nil
		}
	}
}

// hasUnsent reports whether summaries wait in the outbox for a batch to
// send them (not after a failed send: those are the timer's).
func (s *shard) hasUnsent() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.outbox) > 0 && !s.sendFailed
}

// putBack returns summaries the next consumer refused to the front of the
// outbox, trimmed to its bound, and marks the shard's send failed. It
// reports whether this is the first failure since a success and how many
// summaries the trim dropped.
func (s *shard) putBack(out []summary.Summary) (first bool, dropped int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	first = !s.sendFailed
	s.sendFailed = true
	s.outbox = append(out, s.outbox...)
	return first, s.trimOutbox()
}

// warnRefused counts and logs what putBack reported.
func (p *invocationProcessor) warnRefused(ctx context.Context, err error, first bool, dropped int64) {
	if dropped > 0 {
		p.tel.ProcessorInvocationBoundHits.Add(context.WithoutCancel(ctx), dropped, boundOutboxAttr)
		p.logger.Warn("dropped invocation summaries the next consumer did not take", zap.Int64("count", dropped))
	}
	if first {
		p.logger.Warn("next consumer refused invocation summaries; retrying from the outbox", zap.Error(err))
	}
}
