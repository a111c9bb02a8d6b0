package e2e

import (
	"bufio"
	"context"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentledger/agentledger/internal/testbin"
)

// Every file in collector-config is checked by the tool that reads it; a new
// file without a check fails TestConfigsAreKnown.
var (
	collectorConfigs = []string{"local.yaml", "jaeger.yaml", "loadbalancing.yaml"}
	// overlayConfigs are layered over the configs listed with them, and
	// validated that way.
	overlayConfigs = map[string][]string{
		"shared.yaml":               {"local.yaml", "jaeger.yaml"},
		"shared-loadbalancing.yaml": {"loadbalancing.yaml"},
		"view.yaml":                 {"jaeger.yaml"},
	}
	jaegerConfigs    = []string{"jaeger-v2.yaml"}
	prometheusConfig = "prometheus.yml"
	builderManifest  = "builder-config.yaml"
)

func TestConfigsAreKnown(t *testing.T) {
	entries, err := os.ReadDir(repoPath(t, "collector-config"))
	if err != nil {
		t.Fatal(err)
	}
	known := slices.Concat(collectorConfigs, jaegerConfigs, []string{prometheusConfig, builderManifest})
	for name := range overlayConfigs {
		known = append(known, name)
	}
	for _, e := range entries {
		if !slices.Contains(known, e.Name()) {
			t.Errorf("collector-config/%s has no validation in internal/e2e/config_test.go", e.Name())
		}
	}
}

func runValidate(t *testing.T, bin string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
}

func TestCollectorConfigsValidate(t *testing.T) {
	bin := collectorBin(t)
	for _, name := range collectorConfigs {
		t.Run(name, func(t *testing.T) {
			runValidate(t, bin, "validate", "--config", repoPath(t, "collector-config", name))
		})
	}
}

func TestCollectorOverlaysValidate(t *testing.T) {
	bin := collectorBin(t)
	for overlay, bases := range overlayConfigs {
		for _, base := range bases {
			t.Run(base+"+"+overlay, func(t *testing.T) {
				runValidate(t, bin, "validate", "--config", repoPath(t, "collector-config", base),
					"--config", repoPath(t, "collector-config", overlay))
			})
		}
	}
}

// boundSets are the bounds README.md's table documents, each set alone on
// the command line to a value far from its default (issue 34: a single
// --set of max_open_invocations made shared.yaml's fixed tenant quotas
// exceed it). The tenant quotas themselves only where a config has a
// tenant.
var boundSets = []string{
	"max_open_invocations=40",
	"max_open_bytes=1048576",
	"max_closed_invocations=10",
	"max_spans_per_invocation=10",
	"max_invocation_id_bytes=64",
	"max_name_bytes=16",
	"shed_heap_bytes=1048576",
}

var tenantBoundSets = []string{"tenant::max_open_invocations=5", "tenant::max_open_bytes=65536"}

// TestShippedConfigsTakeASingleSetOfEachBound validates every shipped
// collector config (and overlay) with each documented bound set alone.
func TestShippedConfigsTakeASingleSetOfEachBound(t *testing.T) {
	bin := collectorBin(t)
	type combo struct {
		name    string
		files   []string
		tenants bool
	}
	var combos []combo
	for _, name := range collectorConfigs {
		combos = append(combos, combo{name: name, files: []string{name}})
	}
	for overlay, bases := range overlayConfigs {
		for _, base := range bases {
			combos = append(combos, combo{name: base + "+" + overlay, files: []string{base, overlay}, tenants: overlay == "shared.yaml"})
		}
	}
	for _, c := range combos {
		if !hasInvocationProcessor(t, c.files) {
			continue
		}
		sets := boundSets
		if c.tenants {
			sets = slices.Concat(boundSets, tenantBoundSets)
		}
		for _, set := range sets {
			t.Run(c.name+"/"+set, func(t *testing.T) {
				var args []string
				for _, f := range c.files {
					args = append(args, "--config", repoPath(t, "collector-config", f))
				}
				runValidate(t, bin, append([]string{"validate"}, append(args, "--set", "processors::invocation::"+set)...)...)
			})
		}
	}
}

// hasInvocationProcessor reports whether any of the configs configures
// the invocation processor.
func hasInvocationProcessor(t *testing.T, files []string) bool {
	t.Helper()
	for _, f := range files {
		raw, err := os.ReadFile(repoPath(t, "collector-config", f))
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Processors map[string]any `yaml:"processors"`
		}
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		if _, ok := doc.Processors["invocation"]; ok {
			return true
		}
	}
	return false
}

func TestJaegerConfigValidates(t *testing.T) {
	bin := jaegerBin(t)
	for _, name := range jaegerConfigs {
		t.Run(name, func(t *testing.T) {
			runValidate(t, bin, "validate", "--config", repoPath(t, "collector-config", name))
		})
	}
}

func TestPrometheusConfigValidates(t *testing.T) {
	prom := prometheusBin(t)
	promtool := filepath.Join(filepath.Dir(prom), "promtool")
	if _, err := os.Stat(promtool); err != nil {
		t.Fatalf("promtool not next to %s: %v", prom, err)
	}
	tmpl, err := os.ReadFile(repoPath(t, "collector-config", prometheusConfig))
	if err != nil {
		t.Fatal(err)
	}
	// Check the file as shipped and as the tests and demo render it.
	rendered, err := testbin.RenderPrometheusConfig(tmpl, "127.0.0.1:1", "127.0.0.1:2")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "prometheus.yml")
	if err := os.WriteFile(path, rendered, 0o644); err != nil {
		t.Fatal(err)
	}
	runValidate(t, promtool, "check", "config", repoPath(t, "collector-config", prometheusConfig))
	runValidate(t, promtool, "check", "config", path)
}

// manifest is the part of an ocb manifest this test reads.
type manifest struct {
	Dist struct {
		Name string `yaml:"name"`
	} `yaml:"dist"`
	Receivers  []manifestModule `yaml:"receivers"`
	Processors []manifestModule `yaml:"processors"`
	Exporters  []manifestModule `yaml:"exporters"`
	Connectors []manifestModule `yaml:"connectors"`
	Extensions []manifestModule `yaml:"extensions"`
	Providers  []manifestModule `yaml:"providers"`
}

type manifestModule struct {
	GoMod  string `yaml:"gomod"`
	Import string `yaml:"import"`
	Path   string `yaml:"path"`
}

// releaseVersion is a release's semantic version, v1.2.3.
var releaseVersion = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`)

// selfModule is the root module's path; the component modules are below it.
const selfModule = "github.com/agentledger/agentledger"

// TestBuilderManifestMatchesDistribution checks that the ocb manifest lists
// exactly the components cmd/otelcol-agentledger compiles in, at the versions
// go.mod pins.
func TestBuilderManifestMatchesDistribution(t *testing.T) {
	data, err := os.ReadFile(repoPath(t, "collector-config", builderManifest))
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	if err := yaml.Unmarshal(data, &m); err != nil {
		t.Fatalf("parse %s: %v", builderManifest, err)
	}
	if m.Dist.Name != "otelcol-agentledger" {
		t.Errorf("dist.name = %q, want otelcol-agentledger", m.Dist.Name)
	}
	required := goModRequires(t)
	var imports []string
	for _, mod := range slices.Concat(m.Receivers, m.Processors, m.Exporters, m.Connectors, m.Extensions, m.Providers) {
		path, version, ok := strings.Cut(mod.GoMod, " ")
		if !ok {
			t.Errorf("gomod %q has no version", mod.GoMod)
			continue
		}
		imp := mod.Import
		if imp == "" {
			imp = path
		}
		imports = append(imports, imp)
		if mod.Path != "" {
			t.Errorf("%s: path = %q; the manifest names modules by path and version only, so that it builds outside the checkout", path, mod.Path)
		}
		if strings.HasPrefix(path, selfModule+"/") {
			// Our own component modules: each its own module in the
			// checkout, named at a release version (the OCB test adds
			// replaces to the checkout).
			dir := strings.TrimPrefix(path, selfModule+"/")
			gomod, err := os.ReadFile(repoPath(t, dir, "go.mod"))
			if err != nil || !strings.HasPrefix(string(gomod), "module "+path+"\n") {
				t.Errorf("%s: no module of that path in %s/go.mod (%v)", path, dir, err)
			}
			if !releaseVersion.MatchString(version) || version == "v0.0.0" {
				t.Errorf("%s: version %q, want a release version", path, version)
			}
			continue
		}
		if got := required[path]; got != version {
			t.Errorf("%s: manifest pins %s, go.mod requires %q", path, version, got)
		}
	}
	// The full distribution is main.go with components_full.go (the
	// build without -tags agentledger_local).
	compiled := componentImports(t, "main.go", "components_full.go")
	slices.Sort(imports)
	slices.Sort(compiled)
	for _, p := range compiled {
		if !slices.Contains(imports, p) {
			t.Errorf("cmd/otelcol-agentledger imports %s; the manifest does not list it", p)
		}
	}
	for _, p := range imports {
		if !slices.Contains(compiled, p) {
			t.Errorf("the manifest lists %s; cmd/otelcol-agentledger does not import it", p)
		}
	}
}

// The local distribution (-tags agentledger_local, what make demo runs)
// is a subset of the full one, so that the manifest and `make build` stay
// the distribution of record, and it has what the demo's configs use.
func TestLocalDistributionIsASubset(t *testing.T) {
	full := componentImports(t, "main.go", "components_full.go")
	local := componentImports(t, "main.go", "components_local.go")
	for _, p := range local {
		if !slices.Contains(full, p) {
			t.Errorf("components_local.go imports %s, which the full distribution lacks", p)
		}
	}
	if len(local) >= len(full) {
		t.Errorf("the local distribution has %d components, the full one %d: nothing left out", len(local), len(full))
	}
}

// componentImports returns the component and provider imports of the
// named files of cmd/otelcol-agentledger.
func componentImports(t *testing.T, files ...string) []string {
	t.Helper()
	var compiled []string
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, repoPath(t, "cmd", "otelcol-agentledger", name), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, spec := range f.Imports {
			p, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			if isComponentImport(p) && !slices.Contains(compiled, p) {
				compiled = append(compiled, p)
			}
		}
	}
	return compiled
}

// isComponentImport reports whether an import of main.go is a component or
// confmap provider (rather than the framework packages every main needs).
func isComponentImport(p string) bool {
	if strings.Contains(p, "/confmap/provider/") {
		return true
	}
	last := p[strings.LastIndex(p, "/")+1:]
	for _, suffix := range []string{"receiver", "processor", "exporter", "connector", "extension", "storage"} {
		if strings.HasSuffix(last, suffix) && last != suffix {
			return true
		}
	}
	return strings.HasSuffix(p, "/extension/storage/filestorage")
}

// goModRequires returns module path -> version from the distribution's
// go.mod (cmd/otelcol-agentledger), the one module that requires every
// component.
func goModRequires(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(repoPath(t, "cmd", "otelcol-agentledger", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	inRequire := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "require (":
			inRequire = true
			continue
		case line == ")":
			inRequire = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !inRequire:
			continue
		}
		fields := strings.Fields(line)
		if len(fields) >= 2 {
			out[fields[0]] = fields[1]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
