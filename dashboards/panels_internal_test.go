package dashboards

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseLogfmt(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]string
		err  bool
	}{
		{in: ``, want: map[string]string{}},
		{in: `a=b`, want: map[string]string{"a": "b"}},
		{in: ` gen_ai.agent.name="build bot"  x=1 `, want: map[string]string{"gen_ai.agent.name": "build bot", "x": "1"}},
		{in: `q="say \"hi\""`, want: map[string]string{"q": `say "hi"`}},
		{in: `a=`, want: map[string]string{"a": ""}},
		{in: `novalue`, err: true},
		{in: `=b`, err: true},
		{in: `a="unterminated`, err: true},
		{in: `a="b"c=d`, err: true},
	} {
		got, err := parseLogfmt(tc.in)
		if tc.err {
			assert.Error(t, err, "%q", tc.in)
			continue
		}
		require.NoError(t, err, "%q", tc.in)
		assert.Equal(t, tc.want, got, "%q", tc.in)
	}
}

func TestVarsExpand(t *testing.T) {
	v := Vars{"agent": "build", "__rate_interval": "5m", "__range": "1h"}
	got, err := v.Expand(`rate(x{a=~"$agent",b="${agent}"}[$__rate_interval]) / $__range`)
	require.NoError(t, err)
	assert.Equal(t, `rate(x{a=~"build",b="build"}[5m]) / 1h`, got)

	_, err = v.Expand(`$service and ${other} and $agent`)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "$other, $service")
}

func TestJaegerQueryValidateAndEquals(t *testing.T) {
	ok := JaegerQuery{RefID: "A", QueryType: JaegerQueryTypeSearch, Service: "svc", Operation: "op"}
	require.NoError(t, ok.Validate())
	assert.True(t, ok.Equals(ok))
	assert.True(t, ok.Equals(&ok))
	other := ok
	other.Tags = `a="b"`
	assert.False(t, ok.Equals(other))

	for name, q := range map[string]JaegerQuery{
		"no refId":     {QueryType: JaegerQueryTypeSearch, Service: "svc"},
		"no service":   {RefID: "A", QueryType: JaegerQueryTypeSearch},
		"no trace id":  {RefID: "A"},
		"unknown type": {RefID: "A", QueryType: "upload"},
		"negative":     {RefID: "A", QueryType: JaegerQueryTypeSearch, Service: "svc", Limit: -1},
	} {
		assert.Error(t, q.Validate(), name)
	}
}
