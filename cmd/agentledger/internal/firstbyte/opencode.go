package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/agentledger/agentledger/internal/testbin"
)

// openCodeRounds times what a host on @opencode-ai/sdk waits for with
// its baseUrl at `opencode serve` itself and at `agentledger
// opencode-proxy` in front of it, in interleaved rounds: the first byte
// of the /event stream (server.connected) and of a prompt's answer
// (POST /session/{id}/message, answered once the turn ends), each on a
// session made for the round. One opencode serve and one proxy serve
// every round; OpenCode's provider calls the proxy's model-wire proxy in
// both modes (its config is read once, at start), so the difference is
// the reverse proxy's hop and its recording.
func openCodeRounds(w io.Writer, r *rand.Rand, bin, agentledger, modelURL, otlp, dir string, rounds int, timeout time.Duration) error {
	addrs, err := testbin.FreeAddrs(3)
	if err != nil {
		return err
	}
	serveAddr, proxyAddr, modelAddr := addrs[0], addrs[1], addrs[2]
	for _, d := range []string{"home", "config/opencode/node_modules", "data", "cache", "state", "project"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	cfg, _ := json.Marshal(map[string]any{
		"autoupdate": false, "share": "disabled", "permission": map[string]any{"*": "allow"},
		"provider": map[string]any{"scripted": map[string]any{
			"npm": "@ai-sdk/openai-compatible", "name": "Scripted",
			"options": map[string]any{"baseURL": "http://" + modelAddr, "apiKey": "unused"},
			"models":  map[string]any{"scripted-model": map[string]any{"name": "Scripted Model"}},
		}},
		"model": "scripted/scripted-model", "small_model": "scripted/scripted-model",
	})
	// The plugin SDK looks installed, so OpenCode runs no npm install.
	const dep = `{"dependencies":{"@opencode-ai/plugin":"*"}}`
	for name, body := range map[string]string{"opencode.json": string(cfg), "package.json": dep,
		"package-lock.json": `{"lockfileVersion":3,"packages":{"":` + dep + `}}`} {
		if err := os.WriteFile(filepath.Join(dir, "config/opencode", name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	env := []string{
		"HOME=" + filepath.Join(dir, "home"),
		"XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "XDG_DATA_HOME=" + filepath.Join(dir, "data"),
		"XDG_CACHE_HOME=" + filepath.Join(dir, "cache"), "XDG_STATE_HOME=" + filepath.Join(dir, "state"),
		"OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_SHARE=1",
		"OPENCODE_DISABLE_LSP_DOWNLOAD=1", "OPENCODE_DISABLE_DEFAULT_PLUGINS=1", "OPENCODE_PURE=1",
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	serve, err := testbin.Start("opencode", filepath.Join(dir, "opencode.log"), filepath.Join(dir, "project"), env, bin,
		"serve", "--hostname", "127.0.0.1", "--port", testbin.Port(serveAddr))
	if err != nil {
		return err
	}
	defer func() { _ = serve.Stop(testbin.StopTimeout) }()
	if err := testbin.WaitReady(ctx, serve, "http://"+serveAddr+"/global/health"); err != nil {
		return err
	}
	proxy, err := testbin.Start("agentledger-opencode-proxy", filepath.Join(dir, "proxy.log"), "",
		[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + otlp}, agentledger, "opencode-proxy", "--listen", proxyAddr,
		"--upstream", "http://"+serveAddr, "--model-upstream", modelURL+"/v1", "--model-listen", modelAddr)
	if err != nil {
		return err
	}
	defer func() { _ = proxy.Stop(testbin.StopTimeout) }()
	if err := testbin.WaitReady(ctx, proxy, "http://"+proxyAddr+"/global/health"); err != nil {
		return err
	}

	names := [2]string{"opencode serve", "agentledger opencode-proxy"}
	bases := [2]string{"http://" + serveAddr, "http://" + proxyAddr}
	var events, answers [2][]time.Duration
	hc := &http.Client{Timeout: timeout}
	for round := -1; round < rounds; round++ {
		order := []int{0, 1}
		r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			ev, err := firstByte(hc, http.MethodGet, bases[i]+"/event", nil, false)
			if err != nil {
				return fmt.Errorf("round %d, %s: /event: %w", round+1, names[i], err)
			}
			var session struct {
				ID string `json:"id"`
			}
			if err := postJSON(hc, bases[i]+"/session", `{"title":"firstbyte"}`, &session); err != nil {
				return fmt.Errorf("round %d, %s: %w", round+1, names[i], err)
			}
			ans, err := firstByte(hc, http.MethodPost, bases[i]+"/session/"+session.ID+"/message",
				[]byte(`{"parts":[{"type":"text","text":"say hi"}]}`), true)
			if err != nil {
				return fmt.Errorf("round %d, %s: prompt: %w", round+1, names[i], err)
			}
			if round >= 0 {
				events[i] = append(events[i], ev)
				answers[i] = append(answers[i], ans)
			}
		}
	}
	fmt.Fprintf(w, "\n%d interleaved rounds of an @opencode-ai/sdk host's requests to %s vs %s\n", rounds, names[0], names[1])
	fmt.Fprintf(w, "%-24s %-27s %9s %9s\n", "", "baseUrl", "median", "p90")
	for _, row := range []struct {
		what string
		xs   [2][]time.Duration
	}{{"/event first byte", events}, {"prompt answer first byte", answers}} {
		for i := range names {
			fmt.Fprintf(w, "%-24s %-27s %9s %9s\n", row.what, names[i], ms(quantile(row.xs[i], 0.5)), ms(quantile(row.xs[i], 0.9)))
		}
		diffs := make([]time.Duration, len(row.xs[0]))
		for k := range diffs {
			diffs[k] = row.xs[1][k] - row.xs[0][k]
		}
		fmt.Fprintf(w, "%-24s %-27s %9s   ratio of medians %.3f\n", row.what, "per-round difference", ms(quantile(diffs, 0.5)),
			float64(quantile(row.xs[1], 0.5))/float64(quantile(row.xs[0], 0.5)))
	}
	return nil
}

// firstByte sends the request and returns the time to the first byte of
// the response's body; the body is read to its end when readAll, else
// closed (an event stream).
func firstByte(hc *http.Client, method, url string, body []byte, readAll bool) (time.Duration, error) {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s %s: %s", method, url, resp.Status)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 1)); err != nil {
		return 0, err
	}
	d := time.Since(start)
	if readAll {
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return 0, err
		}
	}
	return d, nil
}

func postJSON(hc *http.Client, url, body string, v any) error {
	resp, err := hc.Post(url, "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
