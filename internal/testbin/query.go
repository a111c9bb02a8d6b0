package testbin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
)

// ErrNotFound is returned by the Jaeger queries when Jaeger has no such
// trace (yet).
var ErrNotFound = errors.New("not found")

var httpClient = &http.Client{Timeout: 10 * time.Second}

// GetJSON GETs rawURL and decodes a 200 answer into v. A 404 is ErrNotFound.
func GetJSON(ctx context.Context, rawURL string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return fmt.Errorf("testbin: %w", err)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return fmt.Errorf("testbin: GET %s: %w", rawURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("testbin: GET %s: %w", rawURL, err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("testbin: GET %s: %w", rawURL, ErrNotFound)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("testbin: GET %s: %s: %s", rawURL, resp.Status, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("testbin: GET %s: decode: %w", rawURL, err)
	}
	return nil
}

// jaegerV3 is the envelope of Jaeger's /api/v3 trace answers: OTLP JSON
// under "result".
type jaegerV3 struct {
	Result json.RawMessage `json:"result"`
}

func decodeV3(env jaegerV3) (ptrace.Traces, error) {
	var um ptrace.JSONUnmarshaler
	td, err := um.UnmarshalTraces(env.Result)
	if err != nil {
		return ptrace.Traces{}, fmt.Errorf("testbin: Jaeger OTLP JSON: %w", err)
	}
	return td, nil
}

// JaegerTrace fetches one trace (hex ID) from Jaeger's /api/v3/traces/{id},
// which keeps span links with their attributes.
func JaegerTrace(ctx context.Context, queryAddr, traceID string) (ptrace.Traces, error) {
	var env jaegerV3
	if err := GetJSON(ctx, "http://"+queryAddr+"/api/v3/traces/"+traceID, &env); err != nil {
		return ptrace.Traces{}, err
	}
	return decodeV3(env)
}

// JaegerServices lists the services Jaeger has seen.
func JaegerServices(ctx context.Context, queryAddr string) ([]string, error) {
	var out struct {
		Services []string `json:"services"`
	}
	if err := GetJSON(ctx, "http://"+queryAddr+"/api/v3/services", &out); err != nil {
		return nil, err
	}
	return out.Services, nil
}

// JaegerFind returns the traces of service that contain a span named
// operation and started within [since, until].
func JaegerFind(ctx context.Context, queryAddr, service, operation string, since, until time.Time) (ptrace.Traces, error) {
	q := url.Values{}
	q.Set("query.service_name", service)
	q.Set("query.operation_name", operation)
	q.Set("query.start_time_min", since.UTC().Format(time.RFC3339Nano))
	q.Set("query.start_time_max", until.UTC().Format(time.RFC3339Nano))
	q.Set("query.num_traces", "1000")
	var env jaegerV3
	if err := GetJSON(ctx, "http://"+queryAddr+"/api/v3/traces?"+q.Encode(), &env); err != nil {
		return ptrace.Traces{}, err
	}
	return decodeV3(env)
}

// JaegerSummaries returns every invocation.summary span Jaeger holds, of any
// service, in traces started within [since, until].
func JaegerSummaries(ctx context.Context, queryAddr string, since, until time.Time) ([]Summary, error) {
	services, err := JaegerServices(ctx, queryAddr)
	if err != nil {
		return nil, err
	}
	var out []Summary
	for _, svc := range services {
		td, err := JaegerFind(ctx, queryAddr, svc, contract.SpanNameSummary, since, until)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, SummariesFromTraces(td)...)
	}
	return out, nil
}

// Sample is one series of a Prometheus instant query.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// PromQuery runs an instant query against Prometheus's HTTP API.
func PromQuery(ctx context.Context, promAddr, query string) ([]Sample, error) {
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	u := "http://" + promAddr + "/api/v1/query?" + url.Values{"query": {query}}.Encode()
	if err := GetJSON(ctx, u, &out); err != nil {
		return nil, err
	}
	if out.Status != "success" {
		return nil, fmt.Errorf("testbin: prometheus query %q: %s", query, out.Error)
	}
	if out.Data.ResultType != "vector" {
		return nil, fmt.Errorf("testbin: prometheus query %q: result type %s, want vector", query, out.Data.ResultType)
	}
	samples := make([]Sample, 0, len(out.Data.Result))
	for _, r := range out.Data.Result {
		s, ok := r.Value[1].(string)
		if !ok {
			return nil, fmt.Errorf("testbin: prometheus query %q: value %v", query, r.Value)
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("testbin: prometheus query %q: %w", query, err)
		}
		samples = append(samples, Sample{Labels: r.Metric, Value: v})
	}
	return samples, nil
}

// PromQueryRange runs a range query over [start, end] and returns, per
// series, its points' values.
func PromQueryRange(ctx context.Context, promAddr, query string, start, end time.Time, step time.Duration) ([][]float64, error) {
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Values [][2]any `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	q := url.Values{
		"query": {query},
		"start": {strconv.FormatFloat(float64(start.UnixMilli())/1000, 'f', 3, 64)},
		"end":   {strconv.FormatFloat(float64(end.UnixMilli())/1000, 'f', 3, 64)},
		"step":  {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
	}
	if err := GetJSON(ctx, "http://"+promAddr+"/api/v1/query_range?"+q.Encode(), &out); err != nil {
		return nil, err
	}
	if out.Status != "success" {
		return nil, fmt.Errorf("testbin: prometheus range query %q: %s", query, out.Error)
	}
	series := make([][]float64, 0, len(out.Data.Result))
	for _, r := range out.Data.Result {
		vals := make([]float64, 0, len(r.Values))
		for _, p := range r.Values {
			s, ok := p[1].(string)
			if !ok {
				return nil, fmt.Errorf("testbin: prometheus range query %q: value %v", query, p)
			}
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return nil, fmt.Errorf("testbin: prometheus range query %q: %w", query, err)
			}
			vals = append(vals, v)
		}
		series = append(series, vals)
	}
	return series, nil
}
