package durable

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/extension/xextension/storage"

	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
)

// flakyWriter fails while fail is set and otherwise records the keys of
// each batch.
type flakyWriter struct {
	fail    error
	batches [][]string
}

func (w *flakyWriter) Batch(_ context.Context, ops ...*storage.Operation) error {
	if w.fail != nil {
		return w.fail
	}
	keys := make([]string, len(ops))
	for i, op := range ops {
		keys[i] = op.Key
	}
	w.batches = append(w.batches, keys)
	return nil
}

func TestLogKeepsOrderAcrossAFailedWrite(t *testing.T) {
	w := &flakyWriter{fail: errors.New("disk full")}
	var released []string
	var failed, written int
	l := New(Config{
		Name:   "test",
		Client: w,
		Release: func(recs []*Record) []int {
			var parts []int
			for _, r := range recs {
				released = append(released, r.Key)
				if r.Held > 0 {
					parts = append(parts, r.Part)
				}
			}
			return parts
		},
		Written: func(context.Context, int64, time.Duration) { written++ },
		Failed:  func(context.Context, int, error, time.Duration) { failed++ },
	})
	ctx := context.Background()
	l.Enqueue(&Record{Part: 0, Key: "a", Value: []byte("1")})
	l.Enqueue(&Record{Part: 1, Key: "b", Value: []byte("2"), Held: 1})
	_, err := l.CommitThrough(ctx, l.LastTicket())
	require.ErrorIs(t, err, w.fail)
	require.True(t, l.Backlog(), "the failed records stay queued")
	require.Empty(t, released, "nothing is released before it is written")

	l.Enqueue(&Record{Part: 0, Key: "c", Value: []byte("3"), Held: 2})
	w.fail = nil
	parts, err := l.CommitThrough(ctx, l.LastTicket())
	require.NoError(t, err)
	require.False(t, l.Backlog())
	require.Equal(t, [][]string{{"a", "b", "c"}}, w.batches, "one batch, in queue order")
	require.Equal(t, []string{"a", "b", "c"}, released)
	require.Equal(t, []int{1, 0}, parts)
	require.Equal(t, 1, failed)
	require.Equal(t, 1, written)

	parts, err = l.Commit(ctx)
	require.NoError(t, err)
	require.Nil(t, parts, "an empty queue writes nothing")
	require.Len(t, w.batches, 1)
}

// blockingWriter holds each Batch until it is let go, after saying it
// began.
type blockingWriter struct {
	began chan []string
	done  chan struct{}
}

func (w *blockingWriter) Batch(_ context.Context, ops ...*storage.Operation) error {
	keys := make([]string, len(ops))
	for i, op := range ops {
		keys[i] = op.Key
	}
	w.began <- keys
	<-w.done
	return nil
}

// summaryRecord is a record of one summary event, not yet encoded.
func summaryRecord(key, id string) *Record {
	r := NewRecord()
	r.Key = key
	r.Op.Events = append(r.Op.Events, journal.Event{Kind: journal.EvEmit, ID: id, Status: "final", Revision: 1})
	r.Summaries = append(r.Summaries, Pending{Event: 0, Summary: summary.Summary{ID: id}})
	return r
}

// A committer encodes the records it finds queued before it waits for
// the write lock: while one write is in progress, the next request's
// record is encoded, and it is written (encoded once) by the next write.
func TestLogEncodesOutsideTheWriteLock(t *testing.T) {
	w := &blockingWriter{began: make(chan []string), done: make(chan struct{})}
	encoded := make(chan string, 4)
	l := New(Config{
		Name:          "test",
		Client:        w,
		EncodeSummary: func(s *summary.Summary) []byte { encoded <- s.ID; return []byte(s.ID) },
		Release:       func([]*Record) []int { return nil },
		Written:       func(context.Context, int64, time.Duration) {},
		Failed:        func(context.Context, int, error, time.Duration) {},
	})
	ctx := context.Background()
	errs := make(chan error, 2)
	l.Enqueue(summaryRecord("a", "inv-a"))
	go func() { _, err := l.CommitThrough(ctx, 1); errs <- err }()
	require.Equal(t, "inv-a", recv(t, encoded))
	require.Equal(t, []string{"a"}, recv(t, w.began), "the first write holds the write lock")

	l.Enqueue(summaryRecord("b", "inv-b"))
	go func() { _, err := l.CommitThrough(ctx, 2); errs <- err }()
	require.Equal(t, "inv-b", recv(t, encoded), "encoded while the first write is in progress")

	w.done <- struct{}{}
	require.Equal(t, []string{"b"}, recv(t, w.began))
	w.done <- struct{}{}
	require.NoError(t, recv(t, errs))
	require.NoError(t, recv(t, errs))
	require.Empty(t, encoded, "each summary encoded once")
}

func recv[T any](t *testing.T, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("nothing received")
		panic("unreachable")
	}
}

// Concurrent committers write every record once, each encoded once, in
// queue order within the writes.
func TestLogConcurrentCommitters(t *testing.T) {
	w := &flakyWriter{}
	var wmu sync.Mutex // flakyWriter is not safe for concurrent use
	var calls atomic.Int64
	l := New(Config{
		Name: "test",
		Client: writerFunc(func(ctx context.Context, ops ...*storage.Operation) error {
			wmu.Lock()
			defer wmu.Unlock()
			for _, op := range ops {
				d, _, err := journal.DecodeOps(journal.KindLog, op.Value)
				if err != nil || string(d[0].Events[0].Summary) != d[0].Events[0].ID {
					return fmt.Errorf("record %s stored wrong: %v", op.Key, err)
				}
			}
			return w.Batch(ctx, ops...)
		}),
		EncodeSummary: func(s *summary.Summary) []byte { calls.Add(1); return []byte(s.ID) },
		Release:       func([]*Record) []int { return nil },
		Written:       func(context.Context, int64, time.Duration) {},
		Failed:        func(context.Context, int, error, time.Duration) {},
	})
	const workers, each = 4, 50
	var qmu sync.Mutex // records are queued in a shard's order
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				qmu.Lock()
				key := fmt.Sprintf("%d/%03d", g, i)
				l.Enqueue(summaryRecord(key, "inv-"+key))
				ticket := l.LastTicket()
				qmu.Unlock()
				if _, err := l.CommitThrough(context.Background(), ticket); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int64(workers*each), calls.Load())
	seen := map[string]bool{}
	last := map[byte]string{}
	for _, b := range w.batches {
		for _, k := range b {
			require.False(t, seen[k], "%s written twice", k)
			seen[k] = true
			require.Less(t, last[k[0]], k, "a worker's records in order")
			last[k[0]] = k
		}
	}
	require.Len(t, seen, workers*each)
}

type writerFunc func(ctx context.Context, ops ...*storage.Operation) error

func (f writerFunc) Batch(ctx context.Context, ops ...*storage.Operation) error {
	return f(ctx, ops...)
}
