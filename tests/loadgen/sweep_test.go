package main

import (
	"bytes"
	"context"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/agentledger/internal/testbin"
)

// TestParseSweep: every key's list is read, a key left out takes the
// single default, and malformed values are refused with the key named.
func TestParseSweep(t *testing.T) {
	def := sweepSpec{invocations: []int{10000}, jobs: []float64{0.25}, workers: []int{4}}
	got, err := parseSweep("invocations=10000,100000,1000000 jobs=0,0.25,1 workers=1,8", def)
	if err != nil {
		t.Fatal(err)
	}
	want := sweepSpec{invocations: []int{10000, 100000, 1000000}, jobs: []float64{0, 0.25, 1}, workers: []int{1, 8}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	got, err = parseSweep("  workers=2  ", def)
	if err != nil {
		t.Fatal(err)
	}
	if want := (sweepSpec{invocations: []int{10000}, jobs: []float64{0.25}, workers: []int{2}}); !reflect.DeepEqual(got, want) {
		t.Errorf("defaults: got %+v, want %+v", got, want)
	}
	for in, wantErr := range map[string]string{
		"invocations":               "not key=",
		"invocations=":              "not key=",
		"invocations=0":             "invocations \"0\" is not a positive integer",
		"workers=1,x":               "workers \"x\"",
		"jobs=1.5":                  "jobs \"1.5\" is not a share",
		"jobs=-0.1":                 "jobs \"-0.1\"",
		"rounds=3":                  "unknown key \"rounds\"",
		"workers=1 workers=8":       "workers given twice",
		"invocations=10,,20":        "invocations \"\"",
		"jobs=0.25 invocations=1e3": "invocations \"1e3\"",
	} {
		if _, err := parseSweep(in, def); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%q: err = %v, want it to say %q", in, err, wantErr)
		}
	}
	if _, err := parseSweep("", sweepSpec{}); err == nil {
		t.Error("an empty sweep with no defaults was accepted")
	}
}

// TestSweepRowFormat: a row prints every column the table heads, the
// ratio to its own pass-through run, RSS in MiB, and a wrong count that
// stands out.
func TestSweepRowFormat(t *testing.T) {
	r := sweepRow{pipeline: pipelineInvocation, invocations: 100000, jobs: 0.25, workers: 8, spans: 1190000,
		spansPerSecond: 60000, passthrough: 100000, p99: 123456789 * time.Nanosecond,
		rssPeak: 300 << 20, passRSSPeak: 100<<20 + 1, final: 100000,
		loadBefore: "5.01 6.00 7.00", loadAfter: "6.50 6.10 7.00", elapsed: 42 * time.Second}
	var b bytes.Buffer
	r.format(&b)
	want := "| 100000 | 25% | 8 | invocation | 1190000 | 60000 | 100000 | x0.60 | 123ms | 300 MiB | 100 MiB | 100000/100000 | 5.01 → 6.50 | 42s |\n"
	if b.String() != want {
		t.Errorf("row\n got %q\nwant %q", b.String(), want)
	}
	if cols, head := strings.Count(want, "|"), strings.Count(strings.SplitN(sweepHeader, "\n", 2)[0], "|"); cols != head {
		t.Errorf("row has %d separators, header %d", cols, head)
	}
	if rule := strings.SplitN(sweepHeader, "\n", 3)[1]; strings.Count(rule, "|") != strings.Count(want, "|") {
		t.Errorf("header rule %q does not match the columns", rule)
	}

	r.final, r.wrong, r.rssPeak, r.passthrough, r.loadAfter = 99998, 2, 0, 0, ""
	b.Reset()
	r.format(&b)
	for _, s := range []string{"| 99998/100000 **2 wrong** |", "| - |", "| ? |", "5.01 → ? |"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("row %q lacks %q", b.String(), s)
		}
	}
	// A missing summary (final short of invocations) is flagged even
	// with nothing counted wrong.
	r.wrong = 0
	b.Reset()
	r.format(&b)
	if !strings.Contains(b.String(), "**0 wrong**") {
		t.Errorf("a short final count is not flagged: %q", b.String())
	}
}

// TestParseVmHWM reads the peak resident set from a /proc status.
func TestParseVmHWM(t *testing.T) {
	status := "Name:\totelcol\nVmPeak:\t 2000000 kB\nVmHWM:\t  123456 kB\nVmRSS:\t  100000 kB\n"
	if got := parseVmHWM([]byte(status)); got != 123456<<10 {
		t.Errorf("got %d", got)
	}
	for _, s := range []string{"", "VmRSS:\t 1 kB\n", "VmHWM:\t x kB\n", "VmHWM:\t 5 MB\n"} {
		if got := parseVmHWM([]byte(s)); got != 0 {
			t.Errorf("%q: got %d, want 0", s, got)
		}
	}
}

// TestSweepFlagsRefused: -sweep needs -collector, does not take
// -profile, and a bad value fails before any workload is built.
func TestSweepFlagsRefused(t *testing.T) {
	for _, c := range []struct {
		o    options
		want string
	}{
		{options{workers: 1, sweep: "workers=1", workload: tiny}, "-sweep needs -collector"},
		{options{workers: 1, collector: "x", sweep: "workers=1", profileDir: "p", workload: tiny}, "-sweep does not take -profile"},
		{options{workers: 1, collector: "x", sweep: "size=1", workload: tiny}, "unknown key"},
	} {
		if err := run(context.Background(), c.o, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.o, err, c.want)
		}
	}
}

// TestLoadgenSweep runs a tiny sweep against the real binary: one row per
// combination, every invocation final with its exact totals, and the
// collector's peak RSS read from /proc.
func TestLoadgenSweep(t *testing.T) {
	bin := testbin.Require(t, testbin.EnvCollectorBin, "make build", ".bin/otelcol-agentledger")
	var out bytes.Buffer
	o := options{collector: bin, workers: 2, timeout: 2 * time.Minute, workDir: t.TempDir(), sweep: "jobs=0,1 workers=1,3", workload: tiny}
	err := run(context.Background(), o, &out)
	t.Logf("loadgen output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(out.String(), "\n"+sweepHeader)
	if !ok {
		t.Fatal("no table")
	}
	rows := strings.Split(strings.TrimSpace(table), "\n")
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4:\n%s", len(rows), table)
	}
	for i, prefix := range []string{"| 40 | 0% | 1 | invocation |", "| 40 | 0% | 3 | invocation |", "| 40 | 100% | 1 | invocation |", "| 40 | 100% | 3 | invocation |"} {
		if !strings.HasPrefix(rows[i], prefix) || !strings.Contains(rows[i], "| 40/40 |") || !strings.Contains(rows[i], " MiB | ") {
			t.Errorf("row %d = %q, want %q..., 40/40 final and RSS in MiB", i, rows[i], prefix)
		}
		if runtime.GOOS == "linux" && strings.Contains(rows[i], "| ? |") {
			t.Errorf("row %d has no RSS: %q", i, rows[i])
		}
	}
}

// TestFitsInMemory: a sweep whose largest size would not fit in three
// quarters of the available memory is refused with the figures named;
// one that fits, or an unknown amount available, is not. The workload is
// streamed, so a million invocations fit where a few hundred MiB are
// free.
func TestFitsInMemory(t *testing.T) {
	if err := fitsInMemory(1000000, 23<<30); err != nil {
		t.Errorf("1,000,000 in 23 GiB: %v", err)
	}
	if err := fitsInMemory(10000000, 0); err != nil {
		t.Errorf("unknown memory: %v", err)
	}
	err := fitsInMemory(1000000, 200<<20)
	if err == nil || !strings.Contains(err.Error(), "1000000 invocations need about 366.2 MiB") || !strings.Contains(err.Error(), "of the 200.0 MiB available") {
		t.Errorf("1,000,000 in 200 MiB: err = %v", err)
	}
	meminfo := "MemTotal:       24683880 kB\nMemFree:        13312000 kB\nMemAvailable:   23850000 kB\n"
	if got := parseMeminfoField([]byte(meminfo), "MemAvailable:"); got != 23850000<<10 {
		t.Errorf("MemAvailable = %d", got)
	}
}
