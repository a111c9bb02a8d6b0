package otelclaudecode

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/internal/genaitest"
)

// fakeResultCLI is a CLI that reads one prompt, saves it to dir/prompt,
// reports its lifecycle (and another prompt's), and answers with a result
// whose line is longer than the Client's read buffer, after a line too
// long to read.
func fakeResultCLI(t *testing.T) (bin, dir string) {
	t.Helper()
	dir = t.TempDir()
	bin = filepath.Join(dir, "claude")
	long := strings.Repeat("x", 200<<10)
	lifecycle := func(uuid, state string) string {
		return `printf '{"type":"command_lifecycle","command_uuid":"%s","state":"` + state + `","session_id":"s-1"}\n' "` + uuid + `"` + "\n"
	}
	script := "#!/bin/sh\nread -r line\nprintf '%s\\n' \"$line\" > " + filepath.Join(dir, "prompt") + "\n" +
		`uuid=$(printf '%s' "$line" | sed -n 's/.*"uuid":"\([^"]*\)".*/\1/p')` + "\n" +
		`printf '{"type":"system","subtype":"init","session_id":"s-1"}\n'` + "\n" +
		lifecycle("$uuid", "queued") + lifecycle("$uuid", "started") + lifecycle("another", "queued") +
		`printf '{"type":"system","subtype":"noise","text":"` + long + `"}\n'` + "\n" +
		`printf '{"type":"result","subtype":"success","session_id":"s-1","is_error":false,"result":"` + long + `"}\n'` + "\n" +
		lifecycle("$uuid", "completed")
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, dir
}

// hostView is the host's stdout: at each complete result line it writes,
// it takes note of the roots exported so far.
type hostView struct {
	exp *tracetest.InMemoryExporter
	// mu guards buf and rootsAtResult.
	mu            sync.Mutex
	buf           bytes.Buffer
	rootsAtResult []string
}

func (h *hostView) Write(b []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	before := h.buf.Len()
	h.buf.Write(b)
	if i := bytes.LastIndexByte(h.buf.Bytes()[:before], '\n'); bytes.Contains(h.buf.Bytes()[i+1:], []byte(`"type":"result"`)) && bytes.Contains(b, []byte("\n")) {
		for _, s := range h.exp.GetSpans() {
			for _, a := range s.Attributes {
				if a.Key == contract.AttrRole && a.Value.AsString() == contract.RoleRoot {
					h.rootsAtResult = append(h.rootsAtResult, invocationID(s.Attributes))
				}
			}
		}
	}
	return len(b), nil
}

func invocationID(attrs []attribute.KeyValue) string {
	for _, a := range attrs {
		if a.Key == contract.AttrInvocationID {
			return a.Value.AsString()
		}
	}
	return ""
}

// TestExecResultAfterExport is the drop-in's happens-before: the host's
// result line comes after the invocation's root was exported, though the
// exporter's own schedule is an hour away; the host's prompt without a
// uuid is given one, which names the exported invocation; and the host
// gets the CLI's stdout byte for byte.
func TestExecResultAfterExport(t *testing.T) {
	bin, dir := fakeResultCLI(t)
	exp := tracetest.NewInMemoryExporter()
	bsp := sdktrace.NewBatchSpanProcessor(exp, sdktrace.WithBatchTimeout(time.Hour))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(instrument.NewSpanProcessor(bsp)))
	defer tp.Shutdown(context.Background())
	c, err := New(bin, WithTracerProvider(tp), WithUpstream("http://127.0.0.1:9"))
	if err != nil {
		t.Fatal(err)
	}
	host := &hostView{exp: exp}
	in := strings.NewReader(`{"type":"user","message":{"role":"user","content":"hi"},"parent_tool_use_id":null,"session_id":""}` + "\n")
	p, err := c.Exec(context.Background(), nil, Stdio{Stdin: in, Stdout: host})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Exited()
	prompt, err := os.ReadFile(filepath.Join(dir, "prompt"))
	if err != nil {
		t.Fatal(err)
	}
	id, rest, ok := cutGivenUUID(string(prompt))
	if !ok || !strings.HasPrefix(rest, `{"type":"user"`) {
		t.Fatalf("the CLI read %q: want the prompt with a uuid given", prompt)
	}
	host.mu.Lock()
	defer host.mu.Unlock()
	if len(host.rootsAtResult) != 1 || host.rootsAtResult[0] != id {
		t.Fatalf("roots exported when the host got the result: %q, want [%q]", host.rootsAtResult, id)
	}
	sc := bufio.NewScanner(bytes.NewReader(host.buf.Bytes()))
	sc.Buffer(nil, 1<<20)
	var types []string
	for sc.Scan() {
		types = append(types, strings.SplitN(sc.Text(), `"`, 5)[3])
	}
	// The lifecycle of the prompt the drop-in named is the drop-in's
	// doing: not passed on; another prompt's is.
	if strings.Join(types, ",") != "system,command_lifecycle,system,result" || host.buf.Len() < 400<<10 ||
		!strings.Contains(host.buf.String(), `"command_uuid":"another"`) {
		t.Fatalf("the host read %d bytes, lines %q", host.buf.Len(), types)
	}
}

func TestNamePrompt(t *testing.T) {
	for _, in := range []string{
		`{"type":"user","uuid":"u-1","message":{}}`,
		`{"type":"user","uuid":null,"message":{}}`,
		`not json`,
	} {
		if out, id := namePrompt([]byte(in)); string(out) != in || id != "" {
			t.Errorf("namePrompt(%s) = %s, %q: want it unchanged", in, out, id)
		}
	}
	out, id := namePrompt([]byte(` {"type":"user"}` + "\n"))
	if want := ` {"uuid":"` + id + `","type":"user"}` + "\n"; string(out) != want || len(id) != 36 {
		t.Fatalf("namePrompt = %q, want %q", out, want)
	}
}

// TestWakeExportedAtOnce: a turn the CLI starts by itself (here a model
// request no prompt owns: an unattributed turn) exports its wake span
// through the Client's flush, not on the exporter's schedule, an hour
// away; the proxy's decision does not wait for it.
func TestWakeExportedAtOnce(t *testing.T) {
	tp, exp := genaitest.WakeProvider(t)
	c, err := New("/bin/sh", WithTracerProvider(tp), WithUpstream("http://127.0.0.1:9"))
	if err != nil {
		t.Fatal(err)
	}
	m := newMapper(c.tracer, c.tracker, c.cfg.agent, "s-wake")
	body, _ := json.Marshal(map[string]any{"model": "m", "stream": true, "messages": []map[string]any{user(text("nobody asked"))}})
	d := m.attribute(httptest.NewRequest(http.MethodPost, "/v1/messages", bytes.NewReader(body)), body)
	id := instrument.InvocationIDFromContext(d.Ctx)
	if w := exp.WaitWake(t); w.Invocation != id || id == "" {
		t.Fatalf("wake of %q exported, want the unattributed turn %q", w.Invocation, id)
	}
}
