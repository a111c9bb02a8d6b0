package invocationprocessor

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/collector/processor"
)

var errInjected = errors.New("injected storage fault")

// memStorage is an in-memory storage.Client whose writes and reads can be
// made to fail. A Batch is all or nothing, as file_storage's is.
type memStorage struct {
	mu         sync.Mutex
	data       map[string][]byte
	failWrites bool // every Set, Delete and writing Batch fails
	failReads  bool // every Get and reading Batch fails
	writes     int  // successful writing calls
	// onBatch, if set, sees every successful Batch's operations.
	onBatch func(ops []*storage.Operation)
}

func newMemStorage() *memStorage { return &memStorage{data: map[string][]byte{}} }

func (m *memStorage) Get(_ context.Context, key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failReads {
		return nil, errInjected
	}
	return bytes.Clone(m.data[key]), nil
}

func (m *memStorage) Set(ctx context.Context, key string, value []byte) error {
	return m.Batch(ctx, storage.SetOperation(key, value))
}

func (m *memStorage) Delete(ctx context.Context, key string) error {
	return m.Batch(ctx, storage.DeleteOperation(key))
}

func (m *memStorage) Batch(_ context.Context, ops ...*storage.Operation) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	writing := false
	for _, op := range ops {
		if op.Type != storage.Get {
			writing = true
		}
	}
	if (writing && m.failWrites) || (!writing && m.failReads) {
		return errInjected
	}
	for _, op := range ops {
		switch op.Type {
		case storage.Get:
			op.Value = bytes.Clone(m.data[op.Key])
		case storage.Set:
			m.data[op.Key] = bytes.Clone(op.Value)
		case storage.Delete:
			delete(m.data, op.Key)
		}
	}
	if writing {
		m.writes++
	}
	if m.onBatch != nil {
		m.onBatch(ops)
	}
	return nil
}

func (*memStorage) Close(context.Context) error { return nil }

func (m *memStorage) setFailWrites(v bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failWrites = v
}

func (m *memStorage) setFailReads(v bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failReads = v
}

// snapshot copies the stored data (what a crash leaves on disk).
func (m *memStorage) snapshot() map[string][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string][]byte, len(m.data))
	for k, v := range m.data {
		out[k] = bytes.Clone(v)
	}
	return out
}

func (m *memStorage) restore(data map[string][]byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.data = maps.Clone(data)
}

func (m *memStorage) size() (keys, total int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, v := range m.data {
		total += len(v)
	}
	return len(m.data), total
}

// memExtension is a storage extension handing out one memStorage.
type memExtension struct {
	component.StartFunc
	component.ShutdownFunc
	client *memStorage
}

func (e *memExtension) GetClient(context.Context, component.Kind, component.ID, string) (storage.Client, error) {
	return e.client, nil
}

// hostWith is a component.Host holding extensions.
type hostWith map[component.ID]component.Component

func (h hostWith) GetExtensions() map[component.ID]component.Component { return h }

var testStorageID = component.MustNewIDWithName("file_storage", "test")

// storedHarness is a harness whose processor keeps its state in mem. Like
// harness it is never started as a whole: the timer goroutine stays off and
// tests drive timers with advance.
func newStoredHarness(t testing.TB, mem *memStorage, clk *fakeClock, sink *consumertest.TracesSink, mod func(*Config)) *harness {
	t.Helper()
	return newStoredHarnessWith(t, settingsForTest(), mem, clk, sink, mod)
}

func newStoredHarnessWith(t testing.TB, set processor.Settings, mem *memStorage, clk *fakeClock, sink *consumertest.TracesSink, mod func(*Config)) *harness {
	t.Helper()
	cfg := createDefaultConfig().(*Config)
	id := testStorageID
	cfg.Storage = &id
	if mod != nil {
		mod(cfg)
	}
	p, err := newProcessor(set, cfg, sink, clk, 2)
	require.NoError(t, err)
	require.NoError(t, p.startStore(context.Background(), hostWith{testStorageID: &memExtension{client: mem}}))
	return &harness{t: t, p: p, sink: sink, clock: clk}
}

// compactAll compacts every partition now, as a timer tick does one at a
// time once a log outgrows its snapshot.
func (h *harness) compactAll() {
	h.t.Helper()
	st := h.p.store
	st.cmu.Lock()
	defer st.cmu.Unlock()
	now := h.p.clock.Now().UnixNano()
	for _, s := range h.p.shards {
		require.NoError(h.t, h.p.compactLocked(context.Background(), s, now))
	}
}
