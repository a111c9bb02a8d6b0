package dashboards

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// File is one generated dashboard: its file name in the dashboards directory
// and the JSON Grafana's file provisioning loads.
type File struct {
	// Name is the file name, e.g. "overview.json".
	Name string
	// JSON is the dashboard model, indented, with a trailing newline.
	JSON []byte
}

// builders lists every dashboard with the file it is generated into.
var builders = []struct {
	file  string
	build func() (dashboard.Dashboard, error)
}{
	{"overview.json", Overview},
	{"invocation.json", Invocation},
}

// Files renders every dashboard. The output depends only on the builders, so
// regenerating without a change reproduces the committed files byte for byte.
func Files() ([]File, error) {
	files := make([]File, 0, len(builders))
	for _, b := range builders {
		d, err := b.build()
		if err != nil {
			return nil, err
		}
		raw, err := Marshal(d)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.file, err)
		}
		files = append(files, File{Name: b.file, JSON: raw})
	}
	return files, nil
}

// Marshal renders a dashboard as the JSON written to disk: two-space
// indentation, no HTML escaping (PromQL has < and >), a trailing newline.
func Marshal(d dashboard.Dashboard) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return nil, fmt.Errorf("marshal dashboard %v: %w", deref(d.Uid), err)
	}
	return buf.Bytes(), nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
