package invocationprocessor

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/metadatatest"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
)

// authData is what an authenticator puts in client.Info (basicauth sets
// username and raw).
type authData map[string]any

func (a authData) GetAttribute(name string) any { return a[name] }

func (a authData) GetAttributeNames() []string {
	names := make([]string, 0, len(a))
	for k := range a {
		names = append(names, k)
	}
	return names
}

// as returns a context of a request the receiver's authenticator accepted
// for user.
func as(user string) context.Context {
	return client.NewContext(context.Background(), client.Info{Auth: authData{"username": user, "raw": "secret"}})
}

func authTenants(c *Config) {
	c.Tenant = &TenantConfig{Source: TenantFromAuth, Attribute: "username"}
}

func resourceTenants(c *Config) {
	c.Tenant = &TenantConfig{Source: TenantFromResource, Attribute: contract.AttrTenant}
}

// tenantBatch is batch with the tenant as a resource attribute.
func tenantBatch(tenant string, spans ...sp) ptrace.Traces {
	td := batch(spans...)
	td.ResourceSpans().At(0).Resource().Attributes().PutStr(contract.AttrTenant, tenant)
	return td
}

// ofTenant returns the summaries of one tenant's invocation.
func (h *harness) ofTenant(tenant, id string) []ptrace.Span {
	var out []ptrace.Span
	for _, s := range h.of(id) {
		if v, ok := s.Attributes().Get(contract.AttrTenant); ok && v.Str() == tenant {
			out = append(out, s)
		}
	}
	return out
}

// intruder is what another tenant sends under inv-1, reusing the victim's
// span and trace IDs: the continuation that would discharge the victim's
// background job and a model call under it, a second root, and a child
// under the victim's root that would meet its children count.
func intruder() []sp {
	v := scenario("inv-1", 0)
	cont, chat := v[4], v[5]
	chat.usage = tokens(5000, 500)
	return []sp{cont, chat,
		{inv: "inv-1", name: "invoke_agent intruder", trace: 1, id: 1, start: 0, end: 10, role: contract.RoleRoot, children: int64(1)},
		{inv: "inv-1", name: "chat", trace: 1, id: 7, parent: 1, start: 1, end: 2, children: int64(0), op: contract.OpChat, usage: tokens(7, 7)},
	}
}

// TestTenantsShareNothing: two tenants use the same invocation id, span
// IDs and traces. The intruder's spans arrive first and in between, and
// would discharge every obligation of the victim's invocation; the
// victim's stays pending until its own last span arrives, then is final
// with exactly its own totals, and the intruder's never touches it.
func TestTenantsShareNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mod     func(*Config)
		deliver func(h *harness, tenant string, spans ...sp)
	}{
		{"auth", authTenants, func(h *harness, tenant string, spans ...sp) {
			require.NoError(h.t, h.p.ConsumeTraces(as(tenant), batch(spans...)))
		}},
		{"resource", resourceTenants, func(h *harness, tenant string, spans ...sp) {
			h.consume(tenantBatch(tenant, spans...))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 3, tc.mod)
			victim := scenario("inv-1", 0)
			tc.deliver(h, "mallory", intruder()...)
			tc.deliver(h, "alice", victim[:4]...)
			tc.deliver(h, "mallory", intruder()...) // duplicates of its own, nothing of alice's
			sums := h.ofTenant("alice", "inv-1")
			require.Len(t, sums, 1)
			assert.Equal(t, contract.StatusPending, strAttr(sums[0], contract.AttrStatus))
			assert.Equal(t, int64(100), intAttr(sums[0], contract.AttrUsageInputTokens))
			assert.Equal(t, []string{"open_followup:background shell"}, strsAttr(sums[0], contract.AttrIncompleteReasons))

			tc.deliver(h, "alice", victim[4:]...)
			sums = h.ofTenant("alice", "inv-1")
			require.Len(t, sums, 2)
			final := sums[1]
			assert.Equal(t, contract.StatusFinal, strAttr(final, contract.AttrStatus))
			assert.Equal(t, int64(1), intAttr(final, contract.AttrRevision))
			assert.Equal(t, int64(150), intAttr(final, contract.AttrUsageInputTokens))
			assert.Equal(t, int64(15), intAttr(final, contract.AttrUsageOutputTokens))
			assert.Equal(t, int64(6), intAttr(final, contract.AttrSpans))
			assert.Equal(t, int64(0), intAttr(final, contract.AttrDuplicateSpans))
			assert.Empty(t, strsAttr(final, contract.AttrAnomalies))

			// Mallory's invocation: its own spans only; final (its root
			// declared one child, which came) with its own tokens, and
			// its continuation's followup link points at a job it does
			// not have.
			m := h.ofTenant("mallory", "inv-1")
			require.Len(t, m, 1)
			assert.Equal(t, int64(5007), intAttr(m[0], contract.AttrUsageInputTokens))
			assert.Equal(t, contract.StatusFinal, strAttr(m[0], contract.AttrStatus))
			assert.Equal(t, int64(4), intAttr(m[0], contract.AttrSpans))
			assert.Contains(t, strsAttr(m[0], contract.AttrAnomalies), contract.AnomalyForeignFollowup+":continue_agent coder")

			// Late spans of one tenant revise only its own invocation.
			tc.deliver(h, "mallory", sp{inv: "inv-1", name: "chat", trace: 2, id: 12, parent: 10, start: 23, end: 24,
				op: contract.OpChat, usage: tokens(1, 1)})
			assert.Len(t, h.ofTenant("alice", "inv-1"), 2, "alice's invocation is not revised")
			m = h.ofTenant("mallory", "inv-1")
			require.Len(t, m, 2)
			assert.Equal(t, int64(2), intAttr(m[1], contract.AttrRevision))
			assert.Equal(t, int64(5008), intAttr(m[1], contract.AttrUsageInputTokens))
			assert.Equal(t, int64(4), intAttr(m[1], contract.AttrDuplicateSpans), "mallory's second delivery: its own duplicates")
			h.shutdown()
			assert.Len(t, h.ofTenant("alice", "inv-1"), 2)
			for _, s := range h.summaries() {
				assert.Equal(t, "inv-1", strAttr(s, contract.AttrInvocationID))
				assert.Contains(t, []string{"alice", "mallory"}, strAttr(s, contract.AttrTenant))
			}
		})
	}
}

// TestSpansWithoutTenant: with the tenant setting on, spans for which no
// valid tenant is found pass through unindexed and are counted.
func TestSpansWithoutTenant(t *testing.T) {
	long := strings.Repeat("t", maxTenantLen+1)
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		ctx  context.Context
		td   ptrace.Traces
	}{
		{"auth: no authenticated client", authTenants, context.Background(), batch(scenario("inv-1", 0)...)},
		{"auth: no such attribute", func(c *Config) { c.Tenant = &TenantConfig{Source: TenantFromAuth, Attribute: "subject"} }, as("alice"), batch(scenario("inv-1", 0)...)},
		{"auth: empty", authTenants, as(""), batch(scenario("inv-1", 0)...)},
		{"auth: not a string", authTenants,
			client.NewContext(context.Background(), client.Info{Auth: authData{"username": []string{"alice"}}}), batch(scenario("inv-1", 0)...)},
		{"auth: NUL", authTenants, as("al\x00ice"), batch(scenario("inv-1", 0)...)},
		{"auth: too long", authTenants, as(long), batch(scenario("inv-1", 0)...)},
		{"auth: invalid UTF-8", authTenants, as("al\xffice"), batch(scenario("inv-1", 0)...)},
		{"resource: missing", resourceTenants, context.Background(), batch(scenario("inv-1", 0)...)},
		{"resource: not a string", resourceTenants, context.Background(), func() ptrace.Traces {
			td := batch(scenario("inv-1", 0)...)
			td.ResourceSpans().At(0).Resource().Attributes().PutInt(contract.AttrTenant, 7)
			return td
		}()},
		{"resource: ignores the authenticated client", resourceTenants, as("alice"), batch(scenario("inv-1", 0)...)},
		{"auth: ignores the resource", authTenants, context.Background(), tenantBatch("alice", scenario("inv-1", 0)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tt := componenttest.NewTelemetry()
			t.Cleanup(func() { require.NoError(t, tt.Shutdown(context.Background())) })
			cfg := createDefaultConfig().(*Config)
			cfg.Summaries.Collector = testCollector
			tc.mod(cfg)
			sink := new(consumertest.TracesSink)
			p, err := newProcessor(metadatatest.NewSettings(tt), cfg, sink, newFakeClock(), 1)
			require.NoError(t, err)
			require.NoError(t, p.ConsumeTraces(tc.ctx, tc.td))
			require.Len(t, sink.AllTraces(), 1)
			assert.True(t, sink.AllTraces()[0] == tc.td, "passed unchanged")
			assert.Empty(t, p.shards[0].invs)
			metadatatest.AssertEqualProcessorInvocationSpansWithoutTenant(t, tt,
				[]metricdata.DataPoint[int64]{{Value: 6}}, metricdatatest.IgnoreTimestamp())
			require.NoError(t, p.Shutdown(context.Background()))
			assert.Empty(t, summarySpans(sink.AllTraces()))
		})
	}
}

// TestTenantsInOneBatch: with source resource, one request may carry
// several tenants' spans; each resource's spans go to its own tenant.
func TestTenantsInOneBatch(t *testing.T) {
	h := newHarness(t, 2, resourceTenants)
	td := tenantBatch("alice", scenario("inv-1", 0)...)
	appendTraces(td, tenantBatch("bob", scenario("inv-1", 0)[1:]...))
	h.consume(td)
	a, b := h.ofTenant("alice", "inv-1"), h.ofTenant("bob", "inv-1")
	require.Len(t, a, 1)
	assert.Equal(t, contract.StatusFinal, strAttr(a[0], contract.AttrStatus))
	assert.Equal(t, int64(0), intAttr(a[0], contract.AttrDuplicateSpans))
	assert.Empty(t, b, "bob's root never came: open, no pending")
	h.shutdown()
	b = h.ofTenant("bob", "inv-1")
	require.Len(t, b, 1)
	assert.Equal(t, contract.StatusIncomplete, strAttr(b[0], contract.AttrStatus))
	assert.Contains(t, strsAttr(b[0], contract.AttrIncompleteReasons), contract.ReasonRootMissing)
	assert.Equal(t, int64(150), intAttr(b[0], contract.AttrUsageInputTokens))
}

// recordingSink is a StatusSink that keeps every view.
type recordingSink struct{ views []statusapi.Invocation }

func (r *recordingSink) PublishInvocations(views []statusapi.Invocation) {
	r.views = append(r.views, views...)
}

// TestStatusViewsCarryTenant: the status extension gets the invocation id
// and the tenant apart, never the ledger key.
func TestStatusViewsCarryTenant(t *testing.T) {
	h := newHarness(t, 1, authTenants)
	rec := &recordingSink{}
	h.p.shards[0].status = rec
	require.NoError(t, h.p.ConsumeTraces(as("alice"), batch(scenario("inv-1", 0)[:3]...)))
	require.NoError(t, h.p.ConsumeTraces(as("bob"), batch(scenario("inv-1", 0)...)))
	require.Len(t, rec.views, 2)
	assert.Equal(t, [2]string{"inv-1", "alice"}, [2]string{rec.views[0].ID, rec.views[0].Tenant})
	assert.Equal(t, statusapi.StatusPending, rec.views[0].Status)
	assert.Equal(t, [2]string{"inv-1", "bob"}, [2]string{rec.views[1].ID, rec.views[1].Tenant})
	assert.Equal(t, statusapi.StatusFinal, rec.views[1].Status)
}

func TestLedgerKey(t *testing.T) {
	assert.Equal(t, "inv-1", ledgerKey("", "inv-1"), "without tenants the key is the id")
	pairs := [][2]string{
		{"", "inv-1"}, {"a", "inv-1"}, {"a", ""}, {"", "a\x00inv-1"}, {"a", "\x00"}, {"ab", "c"}, {"a", "bc"}, {"", "\x00a\x00b"},
	}
	seen := map[string][2]string{}
	for _, p := range pairs {
		key := ledgerKey(p[0], p[1])
		tenant, id := summary.SplitKey(key)
		assert.Equal(t, p, [2]string{tenant, id}, "round trip of %q", p)
		if other, ok := seen[key]; ok {
			t.Errorf("%q and %q share the key %q", p, other, key)
		}
		seen[key] = p
	}
}

// FuzzLedgerKey: every (tenant, id) the processor can form comes back
// from its key, and two such pairs never share one.
func FuzzLedgerKey(f *testing.F) {
	f.Add("a", "b", "", "a\x00b")
	f.Add("ab", "c", "a", "b\x00c")
	f.Fuzz(func(t *testing.T, t1, id1, t2, id2 string) {
		if (t1 != "" && !validName(t1)) || (t2 != "" && !validName(t2)) {
			return // never a tenant: not indexed
		}
		k1, k2 := ledgerKey(t1, id1), ledgerKey(t2, id2)
		gt, gid := summary.SplitKey(k1)
		require.Equal(t, [2]string{t1, id1}, [2]string{gt, gid})
		if t1 != t2 || id1 != id2 {
			require.NotEqual(t, k1, k2)
		}
	})
}

// tenantSpan is one span of one tenant, for the delivery below.
type tenantSpan struct {
	tenant string
	span   sp
}

// deliverTenants sends the spans shuffled, partly duplicated, split into
// random batches and from several goroutines at once. With source auth a
// request holds one tenant's spans (its client's); with source resource a
// request mixes both tenants' resources.
func deliverTenants(t *testing.T, r *rand.Rand, h *harness, source string, items []tenantSpan) {
	t.Helper()
	all := make([]tenantSpan, 0, len(items)*2)
	for _, it := range items {
		all = append(all, it)
		if r.IntN(8) == 0 {
			all = append(all, it)
		}
	}
	r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	type request struct {
		ctx context.Context
		td  ptrace.Traces
	}
	var requests []request
	for len(all) > 0 {
		n := 1 + r.IntN(min(12, len(all)))
		byTenant := map[string][]sp{}
		var order []string
		for _, it := range all[:n] {
			if _, ok := byTenant[it.tenant]; !ok {
				order = append(order, it.tenant)
			}
			byTenant[it.tenant] = append(byTenant[it.tenant], it.span)
		}
		all = all[n:]
		if source == TenantFromAuth {
			for _, tenant := range order {
				requests = append(requests, request{as(tenant), batch(byTenant[tenant]...)})
			}
			continue
		}
		td := ptrace.NewTraces()
		for _, tenant := range order {
			appendTraces(td, tenantBatch(tenant, byTenant[tenant]...))
		}
		requests = append(requests, request{context.Background(), td})
	}
	queue := make(chan request, len(requests))
	for _, req := range requests {
		queue <- req
	}
	close(queue)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for req := range queue {
				if err := h.p.ConsumeTraces(req.ctx, req.td); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// TestPropertyTenantsCollide: two tenants' invocation graphs, generated
// independently but with the same invocation ids, span IDs and trace IDs
// (both generators number them from the same start), are delivered
// interleaved (shuffled, split, duplicated, concurrently; per-tenant
// requests with source auth, mixed requests with source resource) with one
// counted span of one tenant's invocation withheld. Checks: the withheld
// invocation is not final, although the other tenant's twin holds a span
// with the withheld span's ID; once it arrives, every invocation of each
// tenant that the contract lets be final has exactly one final, at
// revision 1 and never revised, with its own generator's totals and
// anomalies; the ones it never lets be final are not.
func TestPropertyTenantsCollide(t *testing.T) {
	const iterations = 12
	const settle = 40 * time.Millisecond
	tenantNames := []string{"alice", "bob"}
	for it := range iterations {
		seed := uint64(it) + 1
		for _, source := range []string{TenantFromAuth, TenantFromResource} {
			t.Run(fmt.Sprintf("%s-seed-%d", source, seed), func(t *testing.T) {
				r := rand.New(rand.NewPCG(seed, 0x7e4a47))
				gens := map[string]*graphGen{}
				for i, tenant := range tenantNames {
					g := &graphGen{r: rand.New(rand.NewPCG(seed, uint64(i)+0x5eed))}
					for k := range 6 {
						g.invs = append(g.invs, g.invocation(fmt.Sprintf("inv-%d", k)))
					}
					g.linkConsumers()
					gens[tenant] = g
				}

				victimTenant := tenantNames[r.IntN(2)]
				var candidates []*genInv
				for _, inv := range gens[victimTenant].invs {
					if inv.taint == "" {
						candidates = append(candidates, inv)
					}
				}
				require.NotEmpty(t, candidates)
				victim := candidates[r.IntN(len(candidates))]
				wi := gens[victimTenant].withholdCounted(victim)
				withheld := victim.spans[wi]
				var first, rest []tenantSpan
				for _, tenant := range tenantNames {
					for _, inv := range gens[tenant].invs {
						for _, s := range inv.first {
							first = append(first, tenantSpan{tenant, s})
						}
						for i, s := range inv.spans {
							if inv == victim && i == wi {
								continue
							}
							rest = append(rest, tenantSpan{tenant, s})
						}
					}
				}

				h := newHarness(t, 1+r.IntN(8), func(c *Config) {
					c.RemoteSettle = settle
					c.Tenant = &TenantConfig{Source: source, Attribute: "username"}
					if source == TenantFromResource {
						c.Tenant.Attribute = contract.AttrTenant
					}
				})
				require.NoError(t, h.p.Start(context.Background(), nil))
				shutdown := sync.OnceFunc(h.shutdown)
				defer shutdown()
				for _, tenant := range tenantNames { // uncounted spans that must overtake their siblings
					var own []sp
					for _, it := range first {
						if it.tenant == tenant {
							own = append(own, it.span)
						}
					}
					if len(own) > 0 {
						if source == TenantFromAuth {
							require.NoError(t, h.p.ConsumeTraces(as(tenant), batch(own...)))
						} else {
							h.consume(tenantBatch(tenant, own...))
						}
					}
				}
				deliverTenants(t, r, h, source, rest)
				h.advance(3 * time.Second)
				for _, s := range h.ofTenant(victimTenant, victim.id) {
					require.NotEqual(t, contract.StatusFinal, strAttr(s, contract.AttrStatus),
						"%s/%s final while %q (span %d) is withheld", victimTenant, victim.id, withheld.name, withheld.id)
				}
				deliverTenants(t, r, h, source, []tenantSpan{{victimTenant, withheld}})
				h.advance(3 * time.Second)
				shutdown()

				for _, tenant := range tenantNames {
					for _, inv := range gens[tenant].invs {
						got := h.ofTenant(tenant, inv.id)
						require.NotEmpty(t, got, "%s/%s", tenant, inv.id)
						if inv.taint != "" {
							requireNeverFinal(t, inv, got)
							continue
						}
						var finals []ptrace.Span
						for _, s := range got {
							st := strAttr(s, contract.AttrStatus)
							require.NotEqual(t, contract.StatusIncomplete, st, "%s/%s: reasons %v", tenant, inv.id, strsAttr(s, contract.AttrIncompleteReasons))
							if st == contract.StatusFinal {
								finals = append(finals, s)
							}
						}
						require.Len(t, finals, 1, "%s/%s: finals (a revision means the other tenant's spans reached it)", tenant, inv.id)
						require.Equal(t, int64(1), intAttr(finals[0], contract.AttrRevision))
						assertTotals(t, tenant+"/"+inv.id, inv.exp, finals[0])
					}
				}
			})
		}
	}
}

// TestStorageKeepsTenantsApart: the stored ledger keys invocations by
// tenant too. After a graceful restart and after a crash (the storage as a
// kill leaves it), alice's open invocation is loaded back as hers alone:
// mallory's spans under the same id, span and trace IDs neither count in
// it nor discharge it, and her last spans make it final with exactly her
// totals.
func TestStorageKeepsTenantsApart(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			mem := newMemStorage()
			clk := newFakeClock()
			sink := new(consumertest.TracesSink)
			victim := scenario("inv-1", 0)
			h := newStoredHarness(t, mem, clk, sink, authTenants)
			require.NoError(t, h.p.ConsumeTraces(as("mallory"), batch(intruder()...)))
			require.NoError(t, h.p.ConsumeTraces(as("alice"), batch(victim[:4]...)))
			if crash {
				disk := mem.snapshot()
				mem = newMemStorage()
				mem.restore(disk)
			} else {
				h.shutdown()
			}
			require.Len(t, h.ofTenant("alice", "inv-1"), 1)
			require.Equal(t, contract.StatusPending, strAttr(h.ofTenant("alice", "inv-1")[0], contract.AttrStatus))

			clk.Advance(time.Minute)
			h2 := newStoredHarness(t, mem, clk, sink, authTenants)
			require.NoError(t, h2.p.ConsumeTraces(as("mallory"), batch(intruder()...)))
			// A summary made before a crash may be sent again after it
			// (the same span); none of alice's may be final yet.
			for _, s := range h2.ofTenant("alice", "inv-1") {
				require.Equal(t, contract.StatusPending, strAttr(s, contract.AttrStatus), "mallory's spans do not close alice's loaded invocation")
			}
			require.NoError(t, h2.p.ConsumeTraces(as("alice"), batch(victim[4:]...)))
			var finals []ptrace.Span
			for _, s := range h2.ofTenant("alice", "inv-1") {
				if strAttr(s, contract.AttrStatus) != contract.StatusPending {
					finals = append(finals, s)
				}
			}
			require.Len(t, finals, 1)
			final := finals[0]
			assert.Equal(t, contract.StatusFinal, strAttr(final, contract.AttrStatus))
			assert.Equal(t, int64(1), intAttr(final, contract.AttrRevision))
			assert.Equal(t, int64(150), intAttr(final, contract.AttrUsageInputTokens))
			assert.Equal(t, int64(15), intAttr(final, contract.AttrUsageOutputTokens))
			assert.Equal(t, int64(6), intAttr(final, contract.AttrSpans))
			assert.Equal(t, int64(0), intAttr(final, contract.AttrDuplicateSpans))
			h2.shutdown()
			for _, s := range h2.ofTenant("mallory", "inv-1") {
				assert.Equal(t, int64(5007), intAttr(s, contract.AttrUsageInputTokens), "mallory's own totals")
			}
			for _, s := range h2.ofTenant("alice", "inv-1") {
				if strAttr(s, contract.AttrStatus) != contract.StatusPending {
					assert.True(t, s.SpanID() == final.SpanID(), "no summary of alice's after her final")
				}
			}
		})
	}
}
