package dashboards

import (
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// committedFiles are the dashboards and the provisioning files as
// committed; WriteProvisioning copies them with other addresses.
//
//go:embed overview.json invocation.json provisioning/datasources/agentledger.yaml provisioning/dashboards/agentledger.yaml
var committedFiles embed.FS

// The addresses the committed provisioning files name, which
// WriteProvisioning replaces.
const (
	committedPrometheusURL = "url: http://localhost:9090"
	committedJaegerURL     = "url: http://localhost:16686"
	committedDashboardPath = "path: /var/lib/grafana/dashboards/agentledger"
)

// WriteProvisioning writes a Grafana provisioning tree under dir for a
// Prometheus at promURL and a Jaeger query service at jaegerURL (for
// example http://127.0.0.1:41234):
//
//	dir/provisioning/datasources/agentledger.yaml  the two data sources, fixed UIDs
//	dir/provisioning/dashboards/agentledger.yaml   a file provider reading dir/dashboards
//	dir/dashboards/overview.json, invocation.json
//
// Grafana loads it when its provisioning path is dir/provisioning
// (GF_PATHS_PROVISIONING, or paths.provisioning in grafana.ini). The files
// are the committed ones with the URLs and the dashboards' path replaced.
// dir is made absolute, since the provider names the dashboards by path.
func WriteProvisioning(dir, promURL, jaegerURL string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	header := fmt.Sprintf("# Written for Prometheus at %s and Jaeger at %s from\n# dashboards/provisioning/ of the agentledger repository.\n", promURL, jaegerURL)
	type file struct {
		from, to     string
		replacements []string // old, new pairs; each old must occur once
	}
	files := []file{
		{"provisioning/datasources/agentledger.yaml", "provisioning/datasources/agentledger.yaml", []string{
			committedPrometheusURL, "url: " + promURL,
			committedJaegerURL, "url: " + jaegerURL,
		}},
		{"provisioning/dashboards/agentledger.yaml", "provisioning/dashboards/agentledger.yaml", []string{
			committedDashboardPath, "path: " + filepath.Join(dir, "dashboards"),
		}},
		{"overview.json", "dashboards/overview.json", nil},
		{"invocation.json", "dashboards/invocation.json", nil},
	}
	for _, f := range files {
		raw, err := committedFiles.ReadFile(f.from)
		if err != nil {
			return err
		}
		text := string(raw)
		for i := 0; i < len(f.replacements); i += 2 {
			if n := strings.Count(text, f.replacements[i]); n != 1 {
				return fmt.Errorf("dashboards: %s has %q %d times, want once", f.from, f.replacements[i], n)
			}
			text = strings.Replace(text, f.replacements[i], f.replacements[i+1], 1)
		}
		if f.replacements != nil {
			text = header + text
		}
		to := filepath.Join(dir, f.to)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(to, []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}
