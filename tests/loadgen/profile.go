package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
)

// profileConfig is a second --config for the collector under -profile:
// contrib's pprof extension on LOADGEN_PPROF_ENDPOINT, the CPU profile of
// the collector's whole life saved to LOADGEN_CPU_PROFILE when it stops,
// and one mutex contention event in mutexFraction sampled. Maps merge
// with the pipeline's config; the extension list replaces its own, so it
// names p's other extensions too.
func profileConfig(p pipeline) string {
	exts := "health_check, pprof"
	if p == pipelineStorage {
		exts = "health_check, file_storage/ledger, pprof"
	}
	return `extensions:
  pprof:
    endpoint: ${env:LOADGEN_PPROF_ENDPOINT}
    save_to_file: ${env:LOADGEN_CPU_PROFILE}
    mutex_profile_fraction: 10
service:
  extensions: [` + exts + `]
`
}

// profiles says where a profiled run writes its profiles: name is the
// run's file name stem in dir.
type profiles struct {
	dir, name string
	// endpoint is the pprof extension's listening address.
	endpoint string
}

// cpuFile is where the collector saves its CPU profile when it stops.
func (p profiles) cpuFile() string { return filepath.Join(p.dir, p.name+".cpu.pprof") }

// env is what the profile config reads.
func (p profiles) env() []string {
	return []string{"LOADGEN_PPROF_ENDPOINT=" + p.endpoint, "LOADGEN_CPU_PROFILE=" + p.cpuFile()}
}

// fetch saves the collector's cumulative allocation and mutex profiles,
// taken after a run, before the collector stops.
func (p profiles) fetch(ctx context.Context) error {
	for _, kind := range []string{"allocs", "mutex"} {
		if err := p.save(ctx, kind); err != nil {
			return err
		}
	}
	return nil
}

func (p profiles) save(ctx context.Context, kind string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.endpoint+"/debug/pprof/"+kind, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s profile: %w", kind, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s profile: %s", kind, resp.Status)
	}
	f, err := os.Create(filepath.Join(p.dir, p.name+"."+kind+".pprof"))
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return fmt.Errorf("%s profile: %w", kind, err)
	}
	return f.Close()
}
