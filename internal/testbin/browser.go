package testbin

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// EnvChromiumBin names headless Chromium (Debian's chromium package; make
// chromium installs it).
const EnvChromiumBin = "CHROMIUM_BIN"

// chromiumFlags keep a headless Chromium on loopback and quiet: no
// sandbox (tests run as root), no GPU, no background or update traffic.
var chromiumFlags = []string{
	"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync",
	"--hide-scrollbars",
}

// Browser runs headless Chromium, one process per call, each with a fresh
// profile directory under Dir.
type Browser struct {
	// Bin is the chromium binary.
	Bin string
	// Dir holds the profile directories.
	Dir string
}

func (b Browser) run(ctx context.Context, args ...string) ([]byte, error) {
	profile, err := os.MkdirTemp(b.Dir, "chromium-profile-")
	if err != nil {
		return nil, fmt.Errorf("testbin: chromium profile: %w", err)
	}
	defer os.RemoveAll(profile)
	cmd := exec.CommandContext(ctx, b.Bin, append(append(slices.Clone(chromiumFlags), "--user-data-dir="+profile), args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("testbin: chromium %s: %w\nstderr:\n%s", strings.Join(args, " "), err, lastLines(stderr.String(), 20))
	}
	return stdout.Bytes(), nil
}

// DumpDOM loads url, lets scripts run for budgetMS of virtual time (timers
// fire and fetches complete within it), and returns the rendered DOM.
func (b Browser) DumpDOM(ctx context.Context, url string, budgetMS int) (string, error) {
	out, err := b.run(ctx, "--virtual-time-budget="+strconv.Itoa(budgetMS), "--dump-dom", url)
	return string(out), err
}

// DumpDOMSized is DumpDOM in a window of width x height pixels, for pages
// that report their own layout.
func (b Browser) DumpDOMSized(ctx context.Context, url string, width, height, budgetMS int) (string, error) {
	out, err := b.run(ctx, "--virtual-time-budget="+strconv.Itoa(budgetMS),
		fmt.Sprintf("--window-size=%d,%d", width, height), "--dump-dom", url)
	return string(out), err
}

// Screenshot loads url, lets scripts run for budgetMS of virtual time, and
// writes a PNG of width x height pixels to path.
func (b Browser) Screenshot(ctx context.Context, url, path string, width, height, budgetMS int) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("testbin: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return fmt.Errorf("testbin: %w", err)
	}
	_, err = b.run(ctx, "--virtual-time-budget="+strconv.Itoa(budgetMS),
		fmt.Sprintf("--window-size=%d,%d", width, height), "--screenshot="+abs, url)
	if err != nil {
		return err
	}
	if st, err := os.Stat(abs); err != nil || st.Size() == 0 {
		return fmt.Errorf("testbin: chromium wrote no screenshot to %s (%v)", abs, err)
	}
	return nil
}
