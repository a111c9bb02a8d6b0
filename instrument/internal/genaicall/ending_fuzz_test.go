package genaicall_test

import (
	"bytes"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument/internal/anthropicwire"
	"github.com/agentledger/agentledger/instrument/internal/genaicall"
	"github.com/agentledger/agentledger/instrument/internal/openaiwire"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// endingAPIs are the endpoints FuzzEndings feeds: path, request body and
// the real parser's Describe.
var endingAPIs = []struct {
	path     string
	req      string
	describe func(body []byte) genaicall.Request
}{
	{"/v1/messages", `{"model":"claude-test","max_tokens":64,"messages":[{"role":"user","content":"hi"}]`,
		func(b []byte) genaicall.Request { return anthropicwire.Describe(b, 1) }},
	{"/v1/chat/completions", `{"model":"gpt-test","messages":[{"role":"user","content":"hi"}]`, openaiwire.Chat.Describe},
	{"/v1/responses", `{"model":"gpt-test","input":"hi"`, openaiwire.Responses.Describe},
}

// served returns what the scripted model answers on api, streamed or
// not, with usage u: a real-shaped response.
func served(t testing.TB, api int, stream bool, u scriptedmodel.Usage) []byte {
	ep := endingAPIs[api]
	req := ep.req
	if stream {
		req += `,"stream":true,"stream_options":{"include_usage":true}`
	}
	req += "}"
	srv := scriptedmodel.New(scriptedmodel.Options{Steps: []scriptedmodel.Step{{Text: "hello", Usage: u}}})
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, ep.path, strings.NewReader(req)))
	if rec.Code != http.StatusOK {
		t.Fatalf("scripted model answered %d: %s", rec.Code, rec.Body)
	}
	return rec.Body.Bytes()
}

// Ways the caller and the transport stop reading in FuzzEndings.
const (
	readAll = iota
	closeAfterCut
	failAfterCut
	numModes
)

// FuzzEndings drives the real parsers (anthropicwire, openaiwire) through
// the middleware with a real-shaped response, arbitrary bytes spliced into
// it, the caller closing it or the transport failing after a cut point.
// Invariants: the ending is one of the table's; a call carries usage only
// when it ended complete, and then no count larger than the response
// delivered could have said; a 200 response never makes a failed (not
// billed) call; the response as served, read whole, is complete with the
// served usage.
func FuzzEndings(f *testing.F) {
	for api := range endingAPIs {
		for _, stream := range []bool{false, true} {
			f.Add(uint8(api), stream, uint16(1200), uint16(340), uint16(200), []byte(nil), uint16(0), uint16(0), uint8(readAll))
			f.Add(uint8(api), stream, uint16(1200), uint16(340), uint16(200), []byte(nil), uint16(0), uint16(300), uint8(closeAfterCut))
			f.Add(uint8(api), stream, uint16(1200), uint16(340), uint16(200), []byte(nil), uint16(0), uint16(300), uint8(failAfterCut))
			f.Add(uint8(api), stream, uint16(7), uint16(9), uint16(0), []byte("data: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n"), uint16(400), uint16(0), uint8(readAll))
			f.Add(uint8(api), stream, uint16(7), uint16(9), uint16(0), []byte("data: {\"error\":{\"message\":\"x\"}}\n\ndata: [DONE]\n\n"), uint16(200), uint16(0), uint8(readAll))
		}
	}
	f.Fuzz(func(t *testing.T, api uint8, stream bool, in, out, cache uint16, splice []byte, at, cut uint16, mode uint8) {
		a := int(api) % len(endingAPIs)
		mode %= numModes
		u := scriptedmodel.Usage{InputTokens: int(in) + int(cache) + 1, OutputTokens: int(out) + 1, CacheReadTokens: int(cache)}
		body := served(t, a, stream, u)
		pristine := len(splice) == 0
		if !pristine {
			i := int(at) % (len(body) + 1)
			body = slices.Concat(body[:i], splice, body[i:])
		}
		delivered := body
		if mode == failAfterCut {
			delivered = body[:int(cut)%(len(body)+1)]
		}

		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		m := genaicall.New(genaicall.Config{TracerProvider: tp, Propagators: propagation.NewCompositeTextMapPropagator()}.WithDefaults(),
			genaicall.Scope{Name: "fuzz", Version: "0", Provider: "fuzz"})
		defer m.EndParked()
		contentType := "application/json"
		if stream {
			contentType = "text/event-stream"
		}
		upstream := io.Reader(bytes.NewReader(delivered))
		if mode == failAfterCut {
			upstream = io.MultiReader(upstream, errReader{io.ErrUnexpectedEOF})
		}
		req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:9"+endingAPIs[a].path, strings.NewReader(endingAPIs[a].req+"}"))
		res, err := m.Handle(req, func(*http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {contentType}},
				Body: io.NopCloser(upstream), ContentLength: -1}, nil
		}, endingAPIs[a].describe)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 97)
		for n := 0; mode != closeAfterCut || n < int(cut); {
			k, err := res.Body.Read(buf)
			n += k
			if err != nil {
				break
			}
		}
		_ = res.Body.Close()

		ended := rec.Ended()
		if len(ended) != 1 {
			t.Fatalf("%d spans ended, want 1", len(ended))
		}
		s := ended[0]
		attrs := map[string]int64{}
		ending := ""
		for _, kv := range s.Attributes() {
			k := string(kv.Key)
			if strings.HasPrefix(k, "gen_ai.usage.") {
				attrs[k] = kv.Value.AsInt64()
			}
			if k == contract.AttrResponseEnding {
				ending = kv.Value.AsString()
			}
		}
		if !slices.Contains(genaicall.Endings, genaicall.Ending(ending)) {
			t.Fatalf("ending %q is not in the table", ending)
		}
		if s.Status().Code == codes.Error {
			t.Errorf("a 200 response made a failed (not billed) call: %v, ending %s", s.Status(), ending)
		}
		if len(attrs) > 0 && ending != contract.EndingComplete {
			t.Errorf("usage %v on a call that ended %s", attrs, ending)
		}
		_, hasIn := attrs[contract.AttrUsageInputTokens]
		_, hasOut := attrs[contract.AttrUsageOutputTokens]
		if ending == contract.EndingComplete && !hasIn && !hasOut {
			t.Errorf("complete without input or output usage: %v", attrs)
		}
		// Complete needs the stream's terminal event among the bytes
		// delivered: a partial count is never the bill.
		if stream && ending == contract.EndingComplete && !slices.ContainsFunc(terminalMarks[a], func(m string) bool { return bytes.Contains(delivered, []byte(m)) }) {
			t.Errorf("complete without any of %q in the stream", terminalMarks[a])
		}
		bound := numbersSum(delivered)
		for k, v := range attrs {
			if v < 0 || v > bound {
				t.Errorf("%s = %d: more than the response could have said (its numbers sum to %d)", k, v, bound)
			}
		}
		if pristine && mode == readAll {
			if ending != contract.EndingComplete {
				t.Fatalf("the served response ended %s, want complete", ending)
			}
			if attrs[contract.AttrUsageInputTokens] != int64(u.InputTokens) || attrs[contract.AttrUsageOutputTokens] != int64(u.OutputTokens) {
				t.Errorf("usage %v, served %+v", attrs, u)
			}
		}
	})
}

// terminalMarks are the text each API's terminal stream event holds.
var terminalMarks = [][]string{{"message_stop"}, {"[DONE]"}, {"response.completed", "response.incomplete"}}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// numbersSum is the sum of every run of digits in b, saturating: no usage
// a parser reads from b can exceed it.
func numbersSum(b []byte) int64 {
	var sum, n int64
	flush := func() {
		if sum > math.MaxInt64-n {
			sum = math.MaxInt64
		} else {
			sum += n
		}
		n = 0
	}
	for _, c := range b {
		if c >= '0' && c <= '9' {
			if n > (math.MaxInt64-9)/10 {
				n = math.MaxInt64
				continue
			}
			n = n*10 + int64(c-'0')
			continue
		}
		flush()
	}
	flush()
	return sum
}
