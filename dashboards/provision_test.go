package dashboards_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/agentledger/agentledger/dashboards"
)

// TestWriteProvisioning checks the tree make demo VIEW=1 writes for its
// ports: the committed data sources with the given URLs and the same UIDs,
// a provider whose path holds the committed dashboards.
func TestWriteProvisioning(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, dashboards.WriteProvisioning(dir, "http://127.0.0.1:40001", "http://127.0.0.1:40002"))

	raw, err := os.ReadFile(filepath.Join(dir, "provisioning", "datasources", "agentledger.yaml"))
	require.NoError(t, err)
	var ds struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			Type string `yaml:"type"`
			UID  string `yaml:"uid"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &ds))
	assert.Equal(t, 1, ds.APIVersion)
	urls := map[string]string{}
	for _, d := range ds.Datasources {
		urls[d.UID] = d.Type + " " + d.URL
	}
	assert.Equal(t, map[string]string{
		dashboards.PrometheusUID: "prometheus http://127.0.0.1:40001",
		dashboards.JaegerUID:     dashboards.JaegerPluginID + " http://127.0.0.1:40002",
	}, urls)
	// Everything else is the committed file's.
	assert.Contains(t, string(raw), "jsonData:\n      httpMethod: POST\n")

	raw, err = os.ReadFile(filepath.Join(dir, "provisioning", "dashboards", "agentledger.yaml"))
	require.NoError(t, err)
	var prov struct {
		Providers []struct {
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &prov))
	require.Len(t, prov.Providers, 1)
	assert.Equal(t, "file", prov.Providers[0].Type)
	assert.Equal(t, filepath.Join(dir, "dashboards"), prov.Providers[0].Options.Path)
	for _, name := range []string{"overview.json", "invocation.json"} {
		want, err := os.ReadFile(name)
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(prov.Providers[0].Options.Path, name))
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got), name)
	}
}
