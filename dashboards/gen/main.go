// Command gen writes the agentledger dashboards as JSON files. go generate
// runs it in the dashboards directory:
//
//	go generate ./dashboards/...
//
// or, from anywhere, go run ./dashboards/gen -out dashboards.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentledger/agentledger/dashboards"
)

func main() {
	out := flag.String("out", ".", "directory to write the dashboard JSON files into")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	files, err := dashboards.Files()
	if err != nil {
		return err
	}
	for _, f := range files {
		path := filepath.Join(dir, f.Name)
		if err := os.WriteFile(path, f.JSON, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}
