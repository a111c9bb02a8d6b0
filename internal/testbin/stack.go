package testbin

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// CollectorAddrs are the listeners and files collector-config/local.yaml and
// collector-config/jaeger.yaml read from the environment.
type CollectorAddrs struct {
	OTLPGRPC   string // AGENTLEDGER_OTLP_GRPC_ENDPOINT
	OTLPHTTP   string // AGENTLEDGER_OTLP_HTTP_ENDPOINT
	Health     string // AGENTLEDGER_HEALTH_ENDPOINT
	Telemetry  string // 127.0.0.1:AGENTLEDGER_TELEMETRY_PORT
	Prometheus string // AGENTLEDGER_PROMETHEUS_ENDPOINT (jaeger.yaml)
	JaegerOTLP string // AGENTLEDGER_JAEGER_OTLP_ENDPOINT (jaeger.yaml)
	TracesFile string // AGENTLEDGER_TRACES_FILE (local.yaml)
	Status     string // AGENTLEDGER_STATUS_ENDPOINT (the invocation_status extension)
	// StorageDir is the file_storage directory holding the invocation
	// ledger's state (AGENTLEDGER_STORAGE_DIR): one per collector, and the
	// same one again to restart a collector on its state.
	StorageDir string
}

// NewCollectorAddrs picks free loopback ports for every listener and puts
// the traces file in dir. JaegerOTLP is left empty for the caller to set.
func NewCollectorAddrs(dir string) (CollectorAddrs, error) {
	addrs, err := FreeAddrs(6)
	if err != nil {
		return CollectorAddrs{}, err
	}
	return CollectorAddrs{
		OTLPGRPC:   addrs[0],
		OTLPHTTP:   addrs[1],
		Health:     addrs[2],
		Telemetry:  addrs[3],
		Prometheus: addrs[4],
		Status:     addrs[5],
		TracesFile: filepath.Join(dir, "traces.json"),
		StorageDir: filepath.Join(dir, "storage"),
	}, nil
}

// Env returns the environment variables that point the collector configs at
// these addresses.
func (a CollectorAddrs) Env() []string {
	env := []string{
		"AGENTLEDGER_OTLP_GRPC_ENDPOINT=" + a.OTLPGRPC,
		"AGENTLEDGER_OTLP_HTTP_ENDPOINT=" + a.OTLPHTTP,
		"AGENTLEDGER_HEALTH_ENDPOINT=" + a.Health,
		"AGENTLEDGER_TELEMETRY_PORT=" + Port(a.Telemetry),
		"AGENTLEDGER_PROMETHEUS_ENDPOINT=" + a.Prometheus,
		"AGENTLEDGER_TRACES_FILE=" + a.TracesFile,
		"AGENTLEDGER_STATUS_ENDPOINT=" + a.Status,
	}
	if a.StorageDir != "" {
		env = append(env, "AGENTLEDGER_STORAGE_DIR="+a.StorageDir)
	}
	if a.JaegerOTLP != "" {
		env = append(env, "AGENTLEDGER_JAEGER_OTLP_ENDPOINT="+a.JaegerOTLP)
	}
	return env
}

// StartCollector starts the distribution binary with config and waits until
// its health_check extension reports ready. extraEnv is appended after the
// address variables.
func StartCollector(ctx context.Context, bin, config string, a CollectorAddrs, logPath string, extraEnv ...string) (*Process, error) {
	return StartCollectorConfigs(ctx, bin, []string{config}, a, logPath, extraEnv...)
}

// StartCollectorConfigs is StartCollector with several configs, merged by
// the collector in order (a later one overrides and extends an earlier
// one).
func StartCollectorConfigs(ctx context.Context, bin string, configs []string, a CollectorAddrs, logPath string, extraEnv ...string) (*Process, error) {
	var args []string
	for _, c := range configs {
		args = append(args, "--config", c)
	}
	p, err := Start("otelcol-agentledger", logPath, "", append(a.Env(), extraEnv...), bin, args...)
	if err != nil {
		return nil, err
	}
	if err := WaitReady(ctx, p, "http://"+a.Health+"/"); err != nil {
		return p, err
	}
	return p, nil
}

// JaegerAddrs are the listeners collector-config/jaeger-v2.yaml reads from
// the environment.
type JaegerAddrs struct {
	OTLPGRPC  string // JAEGER_OTLP_GRPC_ENDPOINT
	OTLPHTTP  string // JAEGER_OTLP_HTTP_ENDPOINT
	QueryHTTP string // JAEGER_QUERY_HTTP_ENDPOINT (UI and HTTP API)
	QueryGRPC string // JAEGER_QUERY_GRPC_ENDPOINT
}

// NewJaegerAddrs picks free loopback ports for Jaeger's listeners.
func NewJaegerAddrs() (JaegerAddrs, error) {
	addrs, err := FreeAddrs(4)
	if err != nil {
		return JaegerAddrs{}, err
	}
	return JaegerAddrs{OTLPGRPC: addrs[0], OTLPHTTP: addrs[1], QueryHTTP: addrs[2], QueryGRPC: addrs[3]}, nil
}

// Env returns the environment variables that point jaeger-v2.yaml at these
// addresses.
func (a JaegerAddrs) Env() []string {
	return []string{
		"JAEGER_OTLP_GRPC_ENDPOINT=" + a.OTLPGRPC,
		"JAEGER_OTLP_HTTP_ENDPOINT=" + a.OTLPHTTP,
		"JAEGER_QUERY_HTTP_ENDPOINT=" + a.QueryHTTP,
		"JAEGER_QUERY_GRPC_ENDPOINT=" + a.QueryGRPC,
	}
}

// StartJaeger starts the Jaeger v2 binary with config and waits until its
// query API answers.
func StartJaeger(ctx context.Context, bin, config string, a JaegerAddrs, logPath string) (*Process, error) {
	p, err := Start("jaeger", logPath, "", a.Env(), bin, "--config", config)
	if err != nil {
		return nil, err
	}
	if err := WaitReady(ctx, p, "http://"+a.QueryHTTP+"/api/services"); err != nil {
		return p, err
	}
	return p, nil
}

// Default scrape targets in collector-config/prometheus.yml.
const (
	defaultExporterTarget  = "127.0.0.1:8889"
	defaultTelemetryTarget = "127.0.0.1:8888"
)

// RenderPrometheusConfig returns collector-config/prometheus.yml (tmpl) with
// its two scrape targets replaced by the collector's actual prometheus
// exporter and internal telemetry addresses.
func RenderPrometheusConfig(tmpl []byte, exporter, telemetry string) ([]byte, error) {
	for _, target := range []string{defaultExporterTarget, defaultTelemetryTarget} {
		if n := bytes.Count(tmpl, []byte(`"`+target+`"`)); n != 1 {
			return nil, fmt.Errorf("testbin: prometheus config has %d scrape targets %q, want 1", n, target)
		}
	}
	out := bytes.Replace(tmpl, []byte(`"`+defaultExporterTarget+`"`), []byte(`"`+exporter+`"`), 1)
	out = bytes.Replace(out, []byte(`"`+defaultTelemetryTarget+`"`), []byte(`"`+telemetry+`"`), 1)
	return out, nil
}

// StartPrometheus writes collector-config/prometheus.yml (read from
// tmplPath) with the collector's addresses into dir, starts Prometheus on
// listen with its storage in dir, and waits until it is ready.
func StartPrometheus(ctx context.Context, bin, tmplPath string, a CollectorAddrs, listen, dir, logPath string) (*Process, error) {
	tmpl, err := os.ReadFile(tmplPath)
	if err != nil {
		return nil, fmt.Errorf("testbin: %w", err)
	}
	cfg, err := RenderPrometheusConfig(tmpl, a.Prometheus, a.Telemetry)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		return nil, fmt.Errorf("testbin: %w", err)
	}
	p, err := Start("prometheus", logPath, "", nil, bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+listen,
	)
	if err != nil {
		return nil, err
	}
	if err := WaitReady(ctx, p, "http://"+listen+"/-/ready"); err != nil {
		return p, err
	}
	return p, nil
}
