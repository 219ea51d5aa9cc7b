package configs

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// validate checks what the types cannot: ranges, choices, required and
// unique names. It also fills a named model's empty provider, baseURL and
// apiKeyEnv from the main model, and its idleTimeout and retries always.
func (c *Config) validate() error {
	bad := func(key, why string) error {
		return fmt.Errorf("%w %s: %s: %s", ErrConfig, c.Path, key, why)
	}
	switch c.Model.Provider {
	case "openai", "ollama", "anthropic", "scripted":
	default:
		return bad("model.provider", fmt.Sprintf("unknown provider %q (openai, ollama, anthropic, scripted)", c.Model.Provider))
	}
	switch c.Sandbox.Mode {
	case "", "read-only", "workspace-write", "full":
	default:
		return bad("sandbox.mode", fmt.Sprintf("unknown mode %q (read-only, workspace-write, full, or empty: unconfined)", c.Sandbox.Mode))
	}
	switch c.Sandbox.With {
	case "", "bubblewrap", "landlock":
	default:
		return bad("sandbox.with", fmt.Sprintf("unknown way %q (bubblewrap, landlock, or empty: the best this machine has)", c.Sandbox.With))
	}
	if strings.TrimSpace(c.Sandbox.User) == "" {
		return bad("sandbox.user", "must name a user (a name, a uid or uid:gid) that is not root")
	}
	for _, e := range c.Sandbox.Env {
		if k, _, _ := strings.Cut(e, "="); k == "" || strings.ContainsAny(k, " \t\n") || strings.Contains(strings.TrimSuffix(k, "*"), "*") {
			return bad("sandbox.env", fmt.Sprintf("%q is not a variable's name, a prefix ending in *, nor NAME=value", e))
		}
	}
	if c.ACP.MaxLineBytes < 1<<10 {
		return bad("acp.maxLineBytes", "must be at least 1KiB")
	}
	if c.ACP.MaxPending < 1 {
		return bad("acp.maxPending", "must be at least 1")
	}
	if u := c.Store.URL; u != "" {
		if !strings.HasPrefix(u, "postgres://") && !strings.HasPrefix(u, "postgresql://") {
			return bad("store.url", "must be a postgres:// URL (or empty: files)")
		}
		if !c.Sessions.Enabled {
			return bad("store.url", "keeps sessions only when they are kept: set sessions.enabled: true")
		}
	}
	if c.Sessions.MaxFileBytes < 64<<10 {
		return bad("sessions.maxFileBytes", "must be at least 64KiB")
	}
	if c.Prompt.MaxResourceBytes < 1 {
		return bad("prompt.maxResourceBytes", "must be at least 1 byte")
	}
	if c.Prompt.MaxTextBytes < 1<<10 {
		return bad("prompt.maxTextBytes", "must be at least 1KiB")
	}
	switch c.Prompt.SystemMode {
	case "extend", "replace":
	default:
		return bad("prompt.systemMode", fmt.Sprintf("unknown mode %q (extend, replace)", c.Prompt.SystemMode))
	}
	if c.Prompt.CompactBelow < 0 {
		return bad("prompt.compactBelow", "must not be negative (0 = always the full prompt)")
	}
	if c.Instructions.MaxBytes < 0 {
		return bad("instructions.maxBytes", "must not be negative (0 = none read)")
	}
	for _, n := range c.Instructions.Files {
		if n == "" || n != filepath.Base(n) || n == "." || n == ".." {
			return bad("instructions.files", fmt.Sprintf("%q is not a file name (a name without a folder)", n))
		}
	}
	if c.Model.IdleTimeout < 0 {
		return bad("model.idleTimeout", "must not be negative (0 = never)")
	}
	if c.Model.Retries < 0 || c.Model.Retries > 10 {
		return bad("model.retries", "must be between 0 and 10")
	}
	if c.Turns.Concurrency < 1 {
		return bad("turns.concurrency", "must be at least 1")
	}
	if c.Turns.MaxModelCalls < 1 {
		return bad("turns.maxModelCalls", "must be at least 1")
	}
	if c.Context.Threshold <= 0 || c.Context.Threshold > 1 {
		return bad("context.threshold", "must be in (0, 1]")
	}
	if c.Context.KeepLastTurns < 0 {
		return bad("context.keepLastTurns", "must not be negative")
	}
	if c.Turns.MaxRepeats < 1 {
		return bad("turns.maxRepeats", "must be at least 1")
	}
	if c.Hooks.Timeout <= 0 {
		return bad("hooks.timeout", "must be positive")
	}
	if c.Tools.Fetch.Timeout <= 0 || c.Tools.Fetch.MaxBytes <= 0 || c.Tools.Fetch.MaxRedirects < 0 {
		return bad("tools.fetch", "timeout and maxBytes must be positive, maxRedirects not negative")
	}
	if o := c.Tools.Output; o.MinBytes < 1<<10 || o.MaxBytes < o.MinBytes || o.MaxBytes > 256<<10 || o.KeepBytes < 0 {
		return bad("tools.output", "minBytes must be at least 1KiB, maxBytes at least minBytes and at most 256KiB, keepBytes not negative")
	}
	if c.LSP.Timeout <= 0 {
		return bad("lsp.timeout", "must be positive")
	}
	if c.Tools.Bash.Timeout <= 0 {
		return bad("tools.bash.timeout", "must be positive")
	}
	agents := map[string]bool{}
	for i, a := range c.Agents {
		key := fmt.Sprintf("agents[%d]", i)
		if a.Name == "" || agents[a.Name] || strings.ContainsAny(a.Name, " \t") {
			return bad(key+".name", fmt.Sprintf("%q must be set, unique and without spaces", a.Name))
		}
		agents[a.Name] = true
		if a.Command == "" {
			return bad(key+".command", "must be set")
		}
	}
	if c.MCP.Timeout <= 0 {
		return bad("mcp.timeout", "must be positive")
	}
	if c.MCP.MaxTools < 1 {
		return bad("mcp.maxTools", "must be at least 1")
	}
	for i, m := range c.MCP.Servers {
		key := fmt.Sprintf("mcp.servers[%d]", i)
		switch {
		case m.Name == "":
			return bad(key+".name", "must be set")
		case (m.Command == "") == (m.URL == ""):
			return bad(key, "give either command (stdio) or url (http)")
		case m.Permissions != "" && m.Permissions != "ask" && m.Permissions != "default":
			return bad(key+".permissions", fmt.Sprintf("%q is not ask or default", m.Permissions))
		case m.Timeout < 0:
			return bad(key+".timeout", "must not be negative (unset = mcp.timeout)")
		}
	}
	if err := c.validateServe(bad); err != nil {
		return err
	}
	if err := c.validateCluster(bad); err != nil {
		return err
	}
	seen := map[string]bool{"default": true}
	for i := range c.Models {
		m := &c.Models[i]
		key := fmt.Sprintf("models[%d]", i)
		if m.ID == "" || seen[m.ID] {
			return bad(key+".id", fmt.Sprintf("%q must be set and unique (\"default\" is the main model)", m.ID))
		}
		seen[m.ID] = true
		if m.Provider == "" {
			m.Provider = c.Model.Provider
		}
		if m.BaseURL == "" {
			m.BaseURL, m.BaseURLFrom = c.Model.BaseURL, c.Model.BaseURLFrom
		}
		if m.APIKeyEnv == "" {
			m.APIKeyEnv = c.Model.APIKeyEnv
		}
		// How long to wait and how often to retry belong to the
		// connection: every model has the main model's.
		m.IdleTimeout, m.Retries = c.Model.IdleTimeout, c.Model.Retries
		switch m.Provider {
		case "openai", "ollama", "anthropic", "scripted":
		default:
			return bad(key+".provider", fmt.Sprintf("unknown provider %q", m.Provider))
		}
	}
	return nil
}

// minTokenLen is the shortest bearer token accepted: a short one is
// guessed.
const minTokenLen = 16

// validateServe checks the serve section.
func (c *Config) validateServe(bad func(key, why string) error) error {
	s := c.Serve
	if _, _, err := net.SplitHostPort(s.Listen); err != nil {
		return bad("serve.listen", fmt.Sprintf("%q is not host:port", s.Listen))
	}
	names, tokens := map[string]bool{}, map[string]bool{}
	for i, t := range s.Tokens {
		key := fmt.Sprintf("serve.tokens[%d]", i)
		if t.Name == "" || names[t.Name] || strings.ContainsAny(t.Name, " \t") {
			return bad(key+".name", fmt.Sprintf("%q must be set, unique and without spaces", t.Name))
		}
		names[t.Name] = true
		// The error never quotes the token: it would land in a log.
		if len(t.Token) < minTokenLen || tokens[t.Token] {
			return bad(key+".token", fmt.Sprintf("must be unique and at least %d characters", minTokenLen))
		}
		tokens[t.Token] = true
	}
	for i, o := range s.AllowedOrigins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return bad(fmt.Sprintf("serve.allowedOrigins[%d]", i), fmt.Sprintf("%q is not an origin (scheme://host[:port], e.g. https://editor.example.com)", o))
		}
	}
	if s.MaxConnections < 1 {
		return bad("serve.maxConnections", "must be at least 1")
	}
	if s.StallTimeout <= 0 {
		return bad("serve.stallTimeout", "must be positive")
	}
	if s.MaxMessageBytes < 1<<10 {
		return bad("serve.maxMessageBytes", "must be at least 1KiB")
	}
	if s.MaxIncomingBytes < 2*s.MaxMessageBytes {
		return bad("serve.maxIncomingBytes", fmt.Sprintf("must hold one message at least, read and decoded: twice serve.maxMessageBytes (%s)", 2*s.MaxMessageBytes))
	}
	if s.MaxSessionsPerToken < 1 {
		return bad("serve.maxSessionsPerToken", "must be at least 1")
	}
	if s.MaxMCPProcessesPerToken < 0 {
		return bad("serve.maxMCPProcessesPerToken", "must not be negative (0 = no limit)")
	}
	if s.DetachedIdle < 0 {
		return bad("serve.detachedIdle", "must not be negative (0 = never)")
	}
	if s.MessageTimeout < time.Second {
		return bad("serve.messageTimeout", "must be at least 1s")
	}
	if s.DrainTimeout < 0 {
		return bad("serve.drainTimeout", "must not be negative (0 = cancel at once)")
	}
	if (s.TLS.Cert == "") != (s.TLS.Key == "") {
		return bad("serve.tls", "give both cert and key, or neither (plain HTTP)")
	}
	return nil
}

// validateCluster checks the cluster section, when a name turns it on.
func (c *Config) validateCluster(bad func(key, why string) error) error {
	cl := c.Cluster
	if !cl.Enabled() {
		return nil
	}
	// The name ends up in etcd keys, Consul service names and Kubernetes
	// label values: the characters all three take.
	if len(cl.Name) > 63 || strings.Trim(cl.Name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != "" {
		return bad("cluster.name", fmt.Sprintf("%q: at most 63 letters, digits, '-', '_' or '.'", cl.Name))
	}
	if err := checkAdvertise(cl.Advertise); err != nil {
		return bad("cluster.advertise", err.Error())
	}
	if cl.FailureTimeout < time.Second {
		return bad("cluster.failureTimeout", "must be at least 1s")
	}
	switch cl.Placement {
	case PlacementBalanced, PlacementLocal, PlacementSpread:
	default:
		return bad("cluster.placement", fmt.Sprintf("unknown placement %q (balanced, local, spread)", cl.Placement))
	}
	if cl.StreamPort < -1 || cl.StreamPort > 65535 {
		return bad("cluster.streamPort", "must be a port, 1 to 65535, 0 (a free one) or -1 (no stream)")
	}
	if _, port, _ := net.SplitHostPort(cl.Advertise); cl.StreamPort > 0 && port == strconv.Itoa(cl.StreamPort) {
		return bad("cluster.streamPort", "is advertise's port too: the remote and the stream need one each")
	}
	if cl.StreamPort > 0 && cl.Provider == "automanaged" && cl.StreamPort == cl.HealthPort {
		return bad("cluster.streamPort", "is healthPort too: the health endpoint and the stream need one each")
	}
	switch cl.Provider {
	case "automanaged":
		if len(cl.Peers) == 0 {
			return bad("cluster.peers", "the automanaged provider needs the peers' health endpoints (host:port)")
		}
		for i, p := range cl.Peers {
			if host, port, err := net.SplitHostPort(p); err != nil || host == "" || !validPort(port, false) {
				return bad(fmt.Sprintf("cluster.peers[%d]", i), fmt.Sprintf("%q is not host:port", p))
			}
		}
		if cl.HealthPort < 1 || cl.HealthPort > 65535 {
			return bad("cluster.healthPort", "must be a port, 1 to 65535")
		}
		if _, port, _ := net.SplitHostPort(cl.Advertise); port == strconv.Itoa(cl.HealthPort) {
			return bad("cluster.healthPort", "is advertise's port too: the remote and the health endpoint need one each")
		}
	case "etcd":
		if len(cl.Etcd.Endpoints) == 0 {
			return bad("cluster.etcd.endpoints", "the etcd provider needs at least one endpoint")
		}
		if !strings.HasPrefix(cl.Etcd.Prefix, "/") {
			return bad("cluster.etcd.prefix", fmt.Sprintf("%q must start with /", cl.Etcd.Prefix))
		}
	case "consul", "k8s":
	default:
		return bad("cluster.provider", fmt.Sprintf("unknown provider %q (automanaged, etcd, consul, k8s)", cl.Provider))
	}
	switch t := cl.TLS; {
	case !t.Enabled():
		return bad("cluster.tls", ClusterTLSNeeded)
	case t.Cert == "" || t.Key == "" || t.CA == "":
		return bad("cluster.tls", "needs cert, key and ca, all three")
	}
	return nil
}

// ClusterTLSNeeded says why a cluster without cluster.tls does not
// start, on loopback too.
const ClusterTLSNeeded = "is needed: without the nodes' mutual TLS, any program that reaches the cluster's port — on loopback, any program of this machine, a tenant's command among them — speaks to the nodes as a member; `mm cluster-certs DIR` makes the three files (a CA of the cluster's own), to name in cluster.tls.cert, .key and .ca on every node (docs/cluster.md)"

// checkAdvertise accepts host:port where the host, if any, is one other
// nodes can dial: not a wildcard, and not an IPv6 literal, which protoactor
// writes into addresses without brackets.
func checkAdvertise(a string) error {
	if a == "" {
		return errors.New(`needed with cluster.name: the host:port other nodes reach this node on (":4020" = this machine's hostname)`)
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil || !validPort(port, true) {
		return fmt.Errorf("%q is not host:port", a)
	}
	if ip := net.ParseIP(host); ip != nil && (ip.IsUnspecified() || ip.To4() == nil) {
		return fmt.Errorf("%q: give an address other nodes can reach, not a wildcard or an IPv6 literal", a)
	}
	return nil
}

func validPort(p string, zero bool) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n <= 65535 && (n > 0 || zero && n == 0)
}
