package invocationprocessor

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"
)

// BenchmarkStoredBytes measures what the durable path stores per
// invocation before compaction, with the load generator's shape: 2,000
// invocations of 11 spans (a root, 5 chat spans with usage, 5 tools),
// 32-character ids, shuffled within windows of 100 invocations and sent
// in batches of 500 spans, a tick every 4 batches, compaction off. One op
// is the whole workload into a new file_storage; the metrics are per
// invocation: the file's size (file-B/inv) and its pages in use
// (pages-B/inv), the keys and values written
// (kv-B/inv, values/inv, values/commit), and the log values' bytes by
// part (facts, and of them the span ids, names and times; summaries,
// resources, the ids of each value's header, and the rest: event framing,
// checksums, emission fields), and what three ways of storing facts would
// save (save-*: a per-record table of trace ids, one of names, start
// times as an offset from the record's first span's).
func BenchmarkStoredBytes(b *testing.B) {
	const invocations = 2000
	batches := loadShapedBatches(invocations, 100, 500)
	ctx := context.Background()
	for b.Loop() {
		dir := b.TempDir()
		ext := startFileStorageIn(b, dir)
		rec := &recordingExt{Extension: ext}
		id := component.MustNewIDWithName("file_storage", "bytes")
		cfg := createDefaultConfig().(*Config)
		cfg.Storage = &id
		p, err := newProcessor(settingsForTest(), cfg, consumertest.NewNop(), newFakeClock(), 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := p.startStore(ctx, hostWith{id: rec}); err != nil {
			b.Fatal(err)
		}
		p.store.compactMin = math.MaxInt64
		for i, td := range batches {
			if err := p.ConsumeTraces(ctx, td); err != nil {
				b.Fatal(err)
			}
			if i%4 == 3 {
				if err := p.tick(ctx, p.clock.Now()); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := p.Shutdown(ctx); err != nil {
			b.Fatal(err)
		}
		if err := ext.Shutdown(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		file, used := boltSizes(b, dir)
		c := rec.client.counts()
		per := func(v int64) float64 { return float64(v) / invocations }
		b.ReportMetric(per(file), "file-B/inv")
		b.ReportMetric(per(used), "pages-B/inv")
		b.ReportMetric(per(c.keyBytes+c.valueBytes), "kv-B/inv")
		b.ReportMetric(per(c.values), "values/inv")
		b.ReportMetric(float64(c.values)/float64(max(c.batches, 1)), "values/commit")
		b.ReportMetric(per(c.facts), "facts-B/inv")
		b.ReportMetric(per(c.factIDs), "fact-ids-B/inv")
		b.ReportMetric(per(c.factNames), "fact-names-B/inv")
		b.ReportMetric(per(c.factTimes), "fact-times-B/inv")
		b.ReportMetric(per(c.factTraces-c.tableTraces), "save-trace-table-B/inv")
		b.ReportMetric(per(c.factNames-c.tableNames), "save-name-table-B/inv")
		b.ReportMetric(per(c.factTimes-c.relTimes), "save-rel-times-B/inv")
		b.ReportMetric(per(c.summaries), "summaries-B/inv")
		b.ReportMetric(per(c.resources), "resources-B/inv")
		b.ReportMetric(per(c.ids), "ids-B/inv")
		b.ReportMetric(per(c.logBytes-c.facts-c.summaries-c.resources-c.ids), "rest-B/inv")
		b.StartTimer()
	}
}

// boltSizes returns the size of the file_storage file in dir and the
// bytes of its pages in use (bbolt's high-water mark less its free
// pages): the file grows by doubling, so its size moves in steps.
func boltSizes(tb testing.TB, dir string) (file, used int64) {
	tb.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		fi, err := os.Stat(path)
		if err != nil || fi.IsDir() {
			continue
		}
		file += fi.Size()
		db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
		if err != nil {
			tb.Fatal(err)
		}
		err = db.View(func(tx *bolt.Tx) error {
			used += tx.Size()
			return nil
		})
		used -= int64(db.Stats().FreeAlloc)
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
	return file, used
}

// loadShapedBatches makes n invocations as the load generator's
// (without jobs and duplicates), their spans shuffled within windows of
// window invocations and cut into batches of size spans.
func loadShapedBatches(n, window, size int) []ptrace.Traces {
	rng := rand.New(rand.NewPCG(7, 35))
	var order []sp
	for w := 0; w < n; w += window {
		var spans []sp
		for i := w; i < min(w+window, n); i++ {
			inv := fmt.Sprintf("%016x%016x", i+1, rng.Uint64())
			base := uint64(i) * 32
			spans = append(spans, sp{inv: inv, name: "invoke_agent coder", trace: base + 1, id: base + 1, start: 0, end: 60,
				role: contract.RoleRoot, children: int64(10), extra: map[string]any{contract.AttrConversationID: fmt.Sprintf("session-%d", i%100),
					contract.AttrAgentName: "coder", contract.AttrOperationName: contract.OpInvokeAgent}})
			for k := range uint64(5) {
				spans = append(spans,
					sp{inv: inv, name: "chat gpt-test", trace: base + 1, id: base + 2 + 2*k, parent: base + 1, start: int64(1 + 2*k), end: int64(2 + 2*k),
						children: int64(0), op: contract.OpChat, usage: tokens(1000+rng.Int64N(4000), 50+rng.Int64N(500)),
						extra: map[string]any{contract.AttrRequestModel: "gpt-test"}},
					sp{inv: inv, name: "execute_tool shell", trace: base + 1, id: base + 3 + 2*k, parent: base + 1, start: int64(2 + 2*k), end: int64(3 + 2*k),
						children: int64(0), op: contract.OpExecuteTool, extra: map[string]any{contract.AttrToolName: "shell"}})
			}
		}
		rng.Shuffle(len(spans), func(i, j int) { spans[i], spans[j] = spans[j], spans[i] })
		order = append(order, spans...)
	}
	var out []ptrace.Traces
	for i := 0; i < len(order); i += size {
		td := batch(order[i:min(i+size, len(order))]...)
		td.ResourceSpans().At(0).Resource().Attributes().PutStr("service.name", "loadgen-agent")
		out = append(out, td)
	}
	return out
}

// recordingExt hands out a client that counts what is written through it.
type recordingExt struct {
	storage.Extension
	client *recordingClient
}

func (e *recordingExt) GetClient(ctx context.Context, kind component.Kind, id component.ID, name string) (storage.Client, error) {
	c, err := e.Extension.GetClient(ctx, kind, id, name)
	if err != nil {
		return nil, err
	}
	e.client = &recordingClient{Client: c}
	return e.client, nil
}

// recordingClient counts the keys and values set, and the parts of each
// log value.
type recordingClient struct {
	storage.Client
	mu sync.Mutex
	c  writeCounts
}

type writeCounts struct {
	batches, values, keyBytes, valueBytes      int64
	logBytes, facts, summaries, resources, ids int64
	// Of facts: trace, span and parent ids; names; start and end times;
	// attributes and links (the rest).
	factIDs, factTraces, factNames, factTimes int64
	// What a per-record table of trace ids and of names, and times as a
	// signed offset from the record's first span start plus a duration,
	// would store instead (each table entry once, a one-byte index per
	// span).
	tableTraces, tableNames, relTimes int64
}

func (r *recordingClient) counts() writeCounts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.c
}

func (r *recordingClient) Set(ctx context.Context, key string, value []byte) error {
	r.note(storage.SetOperation(key, value))
	return r.Client.Set(ctx, key, value)
}

func (r *recordingClient) Batch(ctx context.Context, ops ...*storage.Operation) error {
	sets := false
	for _, op := range ops {
		if op.Type == storage.Set {
			sets = true
			r.note(op)
		}
	}
	if sets {
		r.mu.Lock()
		r.c.batches++
		r.mu.Unlock()
	}
	return r.Client.Batch(ctx, ops...)
}

func (r *recordingClient) note(op *storage.Operation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &r.c
	c.values++
	c.keyBytes += int64(len(op.Key))
	c.valueBytes += int64(len(op.Value))
	ops, ids, err := journal.DecodeOps(journal.KindLog, op.Value)
	if err != nil {
		return // not a log value
	}
	c.logBytes += int64(len(op.Value))
	for _, id := range ids {
		c.ids += int64(len(id)) + 1
	}
	for i := range ops {
		traces := map[[16]byte]bool{}
		names := map[string]bool{}
		var base uint64
		for _, r := range ops[i].Resources {
			c.resources += int64(len(r))
		}
		for j := range ops[i].Events {
			ev := &ops[i].Events[j]
			c.facts += int64(len(ev.Fact))
			if ev.Kind == journal.EvFact {
				d := journal.Decoder{B: ev.Fact, ID: ev.ID}
				h, ok := d.Header()
				if ok {
					c.factIDs += 16 + 8
					c.factTraces += 16
					if h.Parent != [8]byte{} {
						c.factIDs += 8
					}
					c.factNames += int64(uvarintLen(uint64(len(h.Name))) + len(h.Name))
					// As written now: the end as its distance from the start.
					c.factTimes += int64(uvarintLen(h.Start) + varintLen(int64(h.End-h.Start)))
					if !traces[h.TraceID] {
						traces[h.TraceID] = true
						c.tableTraces += 16
					}
					c.tableTraces++
					if !names[h.Name] {
						names[h.Name] = true
						c.tableNames += int64(uvarintLen(uint64(len(h.Name))) + len(h.Name))
					}
					c.tableNames++
					if base == 0 {
						base = h.Start
					}
					off := int64(h.Start - base)
					c.relTimes += int64(varintLen(off) + varintLen(int64(h.End-h.Start)))
				}
			}
			c.summaries += int64(len(ev.Summary))
		}
	}
}

// BenchmarkCommitLayout measures what file_storage (bbolt) costs per
// commit for the log records of the load-shaped workload
// (loadShapedBatches), written as the durable log writes them
// (layout=record: one value per partition's record, about 8 a commit)
// and as one value per commit holding the same bytes (layout=commit,
// under keys that sort in commit order). The commits are captured once
// from a run of the processor; one op replays all of them into a new
// file_storage. pages-B/inv is the file's high-water mark per invocation.
func BenchmarkCommitLayout(b *testing.B) {
	const invocations = 2000
	commits := captureCommits(b, loadShapedBatches(invocations, 100, 500))
	ctx := context.Background()
	for _, layout := range []string{"record", "ordered", "commit"} {
		// The values are laid out before the clock starts.
		laid := make([][]*storage.Operation, len(commits))
		for i, c := range commits {
			switch layout {
			case "record":
				laid[i] = c
			case "ordered":
				for _, op := range c {
					laid[i] = append(laid[i], storage.SetOperation(orderedKey(op.Key), op.Value))
				}
			case "commit":
				var v []byte
				for _, op := range c {
					v = append(v, op.Value...)
				}
				laid[i] = []*storage.Operation{storage.SetOperation(fmt.Sprintf("c/%016x", i), v)}
			}
		}
		b.Run("layout="+layout, func(b *testing.B) {
			var pages int64
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				dir := b.TempDir()
				ext := startFileStorageIn(b, dir)
				client, err := ext.GetClient(ctx, component.KindProcessor, component.MustNewID("bench"), "")
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				for _, ops := range laid {
					if err := client.Batch(ctx, ops...); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				if err := client.Close(ctx); err != nil {
					b.Fatal(err)
				}
				if err := ext.Shutdown(ctx); err != nil {
					b.Fatal(err)
				}
				_, pages = boltSizes(b, dir)
				b.StartTimer()
			}
			b.ReportMetric(float64(pages)/invocations, "pages-B/inv")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(commits)), "ns/commit")
		})
	}
}

// captureCommits runs the batches through a processor on memory storage
// and returns the log records of each commit, as written.
func captureCommits(tb testing.TB, batches []ptrace.Traces) [][]*storage.Operation {
	tb.Helper()
	mem := newMemStorage()
	var commits [][]*storage.Operation
	mem.onBatch = func(ops []*storage.Operation) {
		var c []*storage.Operation
		for _, op := range ops {
			if op.Type == storage.Set && len(op.Key) > 2 && op.Key[:2] == "l/" {
				c = append(c, storage.SetOperation(op.Key, append([]byte(nil), op.Value...)))
			}
		}
		if len(c) > 0 {
			commits = append(commits, c)
		}
	}
	cfg := createDefaultConfig().(*Config)
	id := testStorageID
	cfg.Storage = &id
	p, err := newProcessor(settingsForTest(), cfg, consumertest.NewNop(), newFakeClock(), 0)
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	if err := p.startStore(ctx, hostWith{testStorageID: &memExtension{client: mem}}); err != nil {
		tb.Fatal(err)
	}
	p.store.compactMin = math.MaxInt64
	for i, td := range batches {
		if err := p.ConsumeTraces(ctx, td); err != nil {
			tb.Fatal(err)
		}
		if i%4 == 3 {
			if err := p.tick(ctx, p.clock.Now()); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if err := p.Shutdown(ctx); err != nil {
		tb.Fatal(err)
	}
	return commits
}

// orderedKey rewrites a log key l/<part>/<seq> with a fixed-width
// sequence number, so a partition's keys sort in write order.
func orderedKey(key string) string {
	var part int
	var seq uint64
	if _, err := fmt.Sscanf(key, "l/%d/%d", &part, &seq); err != nil {
		return key
	}
	return fmt.Sprintf("l/%d/%016x", part, seq)
}

// BenchmarkStorageParallel is BenchmarkStorage's storage mode with four
// concurrent senders, as the load generator's four exporters send: each
// its own invocations (batches of 10 complete invocations, 60 spans), a
// tick every 16 batches of a sender. Compare its mutex profile
// (-mutexprofile) before and after a change to the locks: the time is
// the machine's as much as the code's.
func BenchmarkStorageParallel(b *testing.B) {
	const senders = 4
	var sets [senders][]ptrace.Traces
	for g := range sets {
		sets[g] = make([]ptrace.Traces, 16)
		for i := range sets[g] {
			var spans []sp
			for j := range 10 {
				s := scenario(fmt.Sprintf("p%d-%d-%d", g, i, j), uint64(((g*16+i)*10+j)*100))
				for k := len(s) - 1; k >= 0; k-- {
					spans = append(spans, s[k])
				}
			}
			sets[g][i] = batch(spans...)
		}
	}
	ctx := context.Background()
	cfg := createDefaultConfig().(*Config)
	cfg.Retention = 0
	ext := startFileStorage(b)
	id := component.MustNewIDWithName("file_storage", "bench")
	cfg.Storage = &id
	p, err := newProcessor(settingsForTest(), cfg, consumertest.NewNop(), newFakeClock(), 0)
	if err != nil {
		b.Fatal(err)
	}
	if err := p.startStore(ctx, hostWith{id: ext}); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int32
	b.SetParallelism((senders + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		g := int(next.Add(1)-1) % senders
		set := sets[g]
		for i := 0; pb.Next(); i++ {
			if err := p.ConsumeTraces(ctx, set[i%len(set)]); err != nil {
				b.Error(err)
				return
			}
			if g == 0 && i%16 == 15 {
				// One timer goroutine, as the processor runs it.
				if err := p.tick(ctx, p.clock.Now()); err != nil {
					b.Error(err)
					return
				}
			}
		}
	})
	b.StopTimer()
	if err := p.Shutdown(ctx); err != nil {
		b.Fatal(err)
	}
}

func uvarintLen(v uint64) int { return len(binary.AppendUvarint(nil, v)) }

func varintLen(v int64) int { return len(binary.AppendVarint(nil, v)) }
