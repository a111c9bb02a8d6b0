package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
)

// resourceCache shares resource attributes between a shard's invocations.
// An agent sends all its invocations under one resource, and a copy per
// invocation was a fifth of an open invocation's memory; shared copies
// also let one summary batch carry them once (buildTraces). The maps it
// returns are never modified. Guarded by the shard's mu.
type resourceCache struct {
	recent [8]map[string]any
	next   int
}

// of returns the attributes as raw values, the same map as an earlier
// call's when the attributes are equal.
func (c *resourceCache) of(res pcommon.Resource) map[string]any {
	attrs := res.Attributes()
	for _, m := range c.recent {
		if m != nil && sameAttributes(attrs, m) {
			return m
		}
	}
	m := attrs.AsRaw()
	c.recent[c.next] = m
	c.next = (c.next + 1) % len(c.recent)
	return m
}

// sameAttributes reports whether raw is attrs.AsRaw(), for scalar values;
// any other value type is reported as different.
func sameAttributes(attrs pcommon.Map, raw map[string]any) bool {
	if attrs.Len() != len(raw) {
		return false
	}
	same := true
	attrs.Range(func(k string, v pcommon.Value) bool {
		r, ok := raw[k]
		if !ok {
			same = false
			return false
		}
		switch v.Type() {
		case pcommon.ValueTypeStr:
			s, ok := r.(string)
			same = ok && s == v.Str()
		case pcommon.ValueTypeInt:
			n, ok := r.(int64)
			same = ok && n == v.Int()
		case pcommon.ValueTypeBool:
			b, ok := r.(bool)
			same = ok && b == v.Bool()
		case pcommon.ValueTypeDouble:
			f, ok := r.(float64)
			same = ok && f == v.Double()
		default:
			same = false
		}
		return same
	})
	return same
}

// nameCache shares span and agent names between a shard's retained
// invocations: each invocation otherwise keeps its own copy of every name
// it saw, as the receiver allocated it, for the whole retention, where a
// shard's invocations mostly repeat a few names. Shared names are equal
// strings, so nothing reads differently. Guarded by the shard's mu.
type nameCache struct {
	names map[string]string
}

// A shard's nameCache holds at most maxSharedNames names of at most
// maxSharedNameLen bytes (about 160 KiB); when it is full it starts over,
// so names of unbounded variety cost no more than that.
const (
	maxSharedNames   = 1024
	maxSharedNameLen = 128
)

// share returns the cache's copy of name, adding name when it has none.
// A longer name is its own copy.
func (c *nameCache) share(name string) string {
	if len(name) > maxSharedNameLen {
		return name
	}
	if shared, ok := c.names[name]; ok {
		return shared
	}
	if c.names == nil || len(c.names) >= maxSharedNames {
		c.names = make(map[string]string, 64)
	}
	c.names[name] = name
	return name
}

// shareNames replaces a retained invocation's names by the cache's
// copies.
func (c *nameCache) shareNames(inv *invocation) {
	for i, n := range inv.Names {
		inv.Names[i] = c.share(n)
	}
	if inv.AgentName != "" {
		inv.AgentName = c.share(inv.AgentName)
	}
}
