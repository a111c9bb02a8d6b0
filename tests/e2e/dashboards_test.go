package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentledger/agentledger/dashboards"
	"github.com/agentledger/agentledger/internal/testbin"
)

// checkDashboardQueries runs every panel query of the generated dashboards
// against the live Prometheus and Jaeger and requires data from each: a
// Prometheus query must return a series with a finite value, a Jaeger search
// at least one trace. agent and service are the reference agent's, for the
// Jaeger searches.
func checkDashboardQueries(t *testing.T, st liveStack, agent, service string) {
	panels, err := dashboards.Panels()
	if err != nil {
		t.Fatal(err)
	}
	if len(panels) == 0 {
		t.Fatal("dashboards.Panels() returned no queries")
	}
	t.Logf("running %d dashboard panel queries", len(panels))
	promVars := dashboards.DefaultVars()
	promVars["service"] = service
	for _, p := range panels {
		name := p.Dashboard + "/" + p.Panel + "/" + p.RefID
		switch p.Kind {
		case dashboards.KindPrometheus:
			q, err := p.Query(promVars)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			ok, why := promHasData(st.prom, q, p.Instant)
			if !ok {
				t.Errorf("%s: %s returned no data: %s", name, q, why)
			}
		case dashboards.KindJaeger:
			jv := dashboards.DefaultVars()
			jv["agent"] = agent
			jv["service"] = service
			jv["collector"] = liveCollector
			params, err := p.JaegerSearch(jv)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			n, err := jaegerV1Search(ctx, st.jaeger.QueryHTTP, params)
			cancel()
			if err != nil {
				t.Errorf("%s: %v", name, err)
			} else if n == 0 {
				t.Errorf("%s: Jaeger search %v found no trace", name, params)
			}
		default:
			t.Errorf("%s: unknown data source kind %q", name, p.Kind)
		}
	}
}

// promHasData polls (bounded) until the query returns a finite value: rate()
// needs two scrapes of a series, so the first answers may be empty.
func promHasData(prom, query string, instant bool) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	why := ""
	err := testbin.Poll(ctx, time.Second, func() (bool, string, error) {
		now := time.Now()
		if instant {
			s, err := testbin.PromQuery(ctx, prom, query)
			if err != nil {
				return false, "", err
			}
			var vals []float64
			for _, x := range s {
				vals = append(vals, x.Value)
			}
			why = "instant values " + fmtVals(vals)
			return finite(vals), why, nil
		}
		series, err := testbin.PromQueryRange(ctx, prom, query, now.Add(-10*time.Minute), now, 5*time.Second)
		if err != nil {
			return false, "", err
		}
		var all []float64
		for _, s := range series {
			all = append(all, s...)
		}
		why = "range values " + fmtVals(all)
		return finite(all), why, nil
	})
	if err != nil {
		return false, err.Error()
	}
	return true, ""
}

func fmtVals(v []float64) string {
	if len(v) > 8 {
		v = v[len(v)-8:]
	}
	return fmt.Sprint(v)
}
