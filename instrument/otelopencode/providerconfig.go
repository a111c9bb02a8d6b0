package otelopencode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
)

// ProviderConfig returns config, the text of an opencode.json (empty for
// a new one), with provider.<providerID>.options.baseURL set to baseURL,
// the model-wire proxy's (Client.ModelProxyURL): OpenCode then sends that
// provider's model requests through the proxy. Every other setting is
// kept; the provider entry and its options are created when missing (a
// provider OpenCode does not know also needs "npm" and "models", see
// OpenCode's provider docs). The provider's real endpoint is the proxy's
// upstream (WithModelProxy), not this file's. It fails when config is not
// a JSON object (an opencode.jsonc with comments is not read) or when
// provider, the provider entry or its options is not an object, when
// providerID is empty, or when baseURL is not an http or https URL with a
// host.
func ProviderConfig(config []byte, providerID, baseURL string) ([]byte, error) {
	if providerID == "" {
		return nil, errors.New("otelopencode: ProviderConfig: empty provider id")
	}
	if u, err := url.Parse(baseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("otelopencode: ProviderConfig: baseURL %q is not an http or https URL with a host", baseURL)
	}
	doc := map[string]any{}
	if len(bytes.TrimSpace(config)) > 0 {
		if err := json.Unmarshal(config, &doc); err != nil {
			return nil, fmt.Errorf("otelopencode: ProviderConfig: the config is not a JSON object (comments are not read): %w", err)
		}
		if doc == nil {
			return nil, errors.New("otelopencode: ProviderConfig: the config is null, not a JSON object")
		}
	}
	providers, err := object(doc, "provider", "provider")
	if err != nil {
		return nil, err
	}
	entry, err := object(providers, providerID, "provider."+providerID)
	if err != nil {
		return nil, err
	}
	options, err := object(entry, "options", "provider."+providerID+".options")
	if err != nil {
		return nil, err
	}
	options["baseURL"] = baseURL
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("otelopencode: ProviderConfig: %w", err)
	}
	return append(out, '\n'), nil
}

// object returns the object parent[key], made when missing; key names it
// in errors.
func object(parent map[string]any, key, name string) (map[string]any, error) {
	v, ok := parent[key]
	if !ok || v == nil {
		o := map[string]any{}
		parent[key] = o
		return o, nil
	}
	o, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("otelopencode: ProviderConfig: %s is %T, not an object", name, v)
	}
	return o, nil
}

// WriteProviderConfig rewrites the opencode.json at path (created when
// missing) with ProviderConfig. OpenCode reads its config when the server
// starts: write it before `opencode serve`.
func WriteProviderConfig(path, providerID, baseURL string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("otelopencode: WriteProviderConfig: %w", err)
	}
	out, err := ProviderConfig(old, providerID, baseURL)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return fmt.Errorf("otelopencode: WriteProviderConfig: %w", err)
	}
	return nil
}
