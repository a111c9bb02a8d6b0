package invocationprocessor

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/agentledger/agentledger/internal/refmodel"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/metadata"
)

// What FuzzDifferential sends that the rule does not read (byte 14 of a
// span): crash equivalence holds over everything the collector
// acknowledges, not only the rule's attributes (issue 34). Depths cross
// journal.MaxValueDepth: 17 (the depth issue 34 lost), the limit itself,
// one beyond it (the batch is refused before it is acknowledged, in both
// runs alike) and far beyond it where nothing is stored.

// dfIn is one span of a program with its resource and scope choices.
type dfIn struct {
	refmodel.Span
	res, scope, extra byte
}

// dfNested is depth slices (maps when inMaps) around a string.
func dfNested(depth int, inMaps bool) refmodel.Value {
	v := refmodel.Str("leaf")
	for i := range depth {
		if inMaps {
			v = refmodel.Value{Kind: refmodel.KindMap, Map: []refmodel.KeyValue{{Key: "m" + strconv.Itoa(i), Value: v}}}
		} else {
			v = refmodel.Value{Kind: refmodel.KindSlice, Slice: []refmodel.Value{v, refmodel.Int(int64(i))}}
		}
	}
	return v
}

// dfManyTypes is a value of every type, empty ones included.
func dfManyTypes() refmodel.Value {
	return refmodel.Value{Kind: refmodel.KindSlice, Slice: []refmodel.Value{
		{}, refmodel.Str(""), refmodel.Str("é\u0000x"), refmodel.Int(-1 << 63), refmodel.Double(-1e300), refmodel.Bool(false),
		{Kind: refmodel.KindBytes, Bytes: []byte{0, 0xff}}, {Kind: refmodel.KindBytes},
		{Kind: refmodel.KindSlice}, {Kind: refmodel.KindMap},
		{Kind: refmodel.KindMap, Map: []refmodel.KeyValue{{Key: "", Value: refmodel.Int(1)}, {Key: "", Value: refmodel.Int(2)}}},
	}}
}

func dfKV(k string, v refmodel.Value) refmodel.KeyValue { return refmodel.KeyValue{Key: k, Value: v} }

// dfExtra is a span's non-rule attributes (bits 0-2 of byte 14).
func dfExtra(code byte) []refmodel.KeyValue {
	switch code {
	case 1: // stored (gen_ai.*), 17 deep
		return []refmodel.KeyValue{dfKV("gen_ai.input.messages", dfNested(17, false))}
	case 2: // stored, at the limit
		return []refmodel.KeyValue{dfKV("gen_ai.input.messages", dfNested(journal.MaxValueDepth, true))}
	case 3: // not stored: accepted at any depth
		return []refmodel.KeyValue{dfKV("http.request.body", dfNested(3*journal.MaxValueDepth, false))}
	case 4:
		return []refmodel.KeyValue{dfKV("gen_ai.output.messages", dfManyTypes()), dfKV("gen_ai.system_instructions", refmodel.Value{})}
	case 5: // an invocation.* key the rule does not know
		return []refmodel.KeyValue{dfKV("invocation.note", dfNested(5, true)), dfKV("invocation.note", refmodel.Str("again"))}
	case 6: // repeated, of two types
		return []refmodel.KeyValue{dfKV("gen_ai.input.messages", refmodel.Str("one")), dfKV("gen_ai.input.messages", dfNested(3, false))}
	case 7: // stored, one beyond the limit: the batch is refused
		return []refmodel.KeyValue{dfKV("gen_ai.input.messages", dfNested(journal.MaxValueDepth+1, false))}
	}
	return nil
}

// dfResource is a span's resource attributes (bits 3-5 of byte 14).
func dfResource(code byte) []refmodel.KeyValue {
	agent := dfKV("service.name", refmodel.Str("agent"))
	switch code {
	case 1:
		return nil
	case 2:
		return []refmodel.KeyValue{agent, dfKV("deep", dfNested(17, false))}
	case 3:
		return []refmodel.KeyValue{agent, dfKV("deep", dfNested(journal.MaxValueDepth, true))}
	case 4: // repeated keys
		return []refmodel.KeyValue{agent, dfKV("service.name", refmodel.Str("other")), dfKV("k", refmodel.Int(1)), dfKV("k", dfManyTypes())}
	case 5:
		return []refmodel.KeyValue{agent, dfKV("many", dfManyTypes()), dfKV("", refmodel.Value{})}
	case 6: // one beyond the limit: a batch with a member under it is refused
		return []refmodel.KeyValue{agent, dfKV("deep", dfNested(journal.MaxValueDepth+1, false))}
	case 7:
		return []refmodel.KeyValue{dfKV("service.name", refmodel.Str("agent-2")), dfKV("host.name", refmodel.Str("h"))}
	}
	return []refmodel.KeyValue{agent}
}

// dfJSONScope writes a span's scope (bits 6-7 of byte 14); the processor
// stores no scope, and reads one only on summaries.
func dfJSONScope(b *strings.Builder, code byte) {
	switch code {
	case 1:
		b.WriteString(`{"name":"lib","version":"1.0","attributes":`)
		dfJSONAttrs(b, []refmodel.KeyValue{dfKV("a", refmodel.Str("b")), dfKV("a", refmodel.Int(2))})
		b.WriteString(`}`)
	case 2:
		b.WriteString(`{"name":"deep","attributes":`)
		dfJSONAttrs(b, []refmodel.KeyValue{dfKV("deep", dfNested(2*journal.MaxValueDepth, true))})
		b.WriteString(`}`)
	case 3: // the processor's own scope on a member span
		b.WriteString(`{"name":` + strconv.Quote(metadata.ScopeName) + `}`)
	default:
		b.WriteString(`{}`)
	}
}

// dfTooDeep reports whether a batch holds a value the journal cannot
// store (on any span: whether it is a member is the processor's to say).
func dfTooDeep(spans []dfIn) bool {
	for _, s := range spans {
		if s.res == 6 || s.extra == 7 {
			return true
		}
	}
	return false
}

// dfJSONString is s as a JSON string (strconv.Quote's \x escapes are not
// JSON).
func dfJSONString(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}
