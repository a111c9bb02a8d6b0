package invocationstatusextension // import "github.com/agentledger/agentledger/extension/invocationstatusextension"

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
)

// anyHost in allowed_hosts turns the Host check off.
const anyHost = "*"

// hostGuard refuses requests whose Host header names none of the hosts
// the API is meant to be reached by. A web page the operator visits can
// make the browser send requests to a loopback address under a name the
// page's own site controls (DNS rebinding); the Host header then carries
// that name, and the browser lets the page read the answer. Accepted are
// localhost, the configured endpoint's host, the allowed_hosts, and any
// IP address: a page can only read an answer from its own origin, and a
// page whose origin is an address of this server is served by it.
type hostGuard struct {
	any   bool
	hosts []string // lower case, without port or brackets
}

func newHostGuard(endpoint string, allowed []string) hostGuard {
	g := hostGuard{hosts: []string{"localhost"}}
	if h, _, err := net.SplitHostPort(endpoint); err == nil && h != "" {
		g.hosts = append(g.hosts, strings.ToLower(h))
	}
	for _, h := range allowed {
		if h == anyHost {
			g.any = true
			continue
		}
		g.hosts = append(g.hosts, strings.ToLower(strings.Trim(h, "[]")))
	}
	return g
}

// allows reports whether a request's Host header (host or host:port) is
// one the API answers.
func (g hostGuard) allows(hostHeader string) bool {
	if g.any {
		return true
	}
	host := hostHeader
	if h, _, err := net.SplitHostPort(hostHeader); err == nil {
		host = h
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	if net.ParseIP(host) != nil {
		return true
	}
	return slices.Contains(g.hosts, strings.TrimSuffix(host, "."))
}

// Security headers sent with every answer: no MIME sniffing, no framing,
// no referrer, and a content security policy that lets nothing load (a
// JSON answer) or only the page's own inline script and style and its
// refresh from the same origin (the page, pageCSP).
const (
	apiCSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)

// pageCSP is the page's policy: its inline script and style by hash, the
// refresh's fetch to its own origin, nothing else, and never in a frame.
func pageCSP(tmpl string) (string, error) {
	script, err := inlineHash(tmpl, "<script>", "</script>")
	if err != nil {
		return "", err
	}
	style, err := inlineHash(tmpl, "<style>", "</style>")
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("default-src 'none'; script-src '%s'; style-src '%s'; connect-src 'self'; img-src 'self'; "+
		"frame-ancestors 'none'; base-uri 'none'; form-action 'none'", script, style), nil
}

// inlineHash is the CSP source of the one inline element between open and
// close in the page template. Neither element holds a template action, so
// the rendered bytes are the template's.
func inlineHash(tmpl, open, close string) (string, error) {
	_, rest, ok := strings.Cut(tmpl, open)
	if !ok {
		return "", fmt.Errorf("invocation_status: page template has no %s", open)
	}
	body, _, ok := strings.Cut(rest, close)
	if !ok || strings.Contains(body, "{{") || strings.Contains(rest[len(body):], open) {
		return "", fmt.Errorf("invocation_status: page template's %s must be one element without template actions", open)
	}
	sum := sha256.Sum256([]byte(body))
	return "sha256-" + base64.StdEncoding.EncodeToString(sum[:]), nil
}

// guard wraps the API and the page: it sets the security headers on every
// answer and refuses a request for a host the API does not serve with 421
// Misdirected Request.
func (e *statusExtension) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", apiCSP)
		if !e.hosts.allows(r.Host) {
			writeError(w, http.StatusMisdirectedRequest, fmt.Sprintf(
				"host %q is not served here (allowed: loopback names and addresses, the endpoint's host, allowed_hosts)", r.Host))
			return
		}
		next.ServeHTTP(w, r)
	})
}
