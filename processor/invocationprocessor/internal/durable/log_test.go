package durable

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/extension/xextension/storage"
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
