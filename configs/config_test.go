package configs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestDefaults(t *testing.T) {
	c := Default()
	if c.ACP.Name != "bob" || c.ACP.Title != "Bob (bash-first agent)" || c.Model.Provider != "openai" ||
		c.Model.BaseURL != "http://127.0.0.1:8080/v1" || !c.Yolo || c.Turns.Concurrency != 1 ||
		c.Turns.MaxModelCalls != 200 || c.Context.Threshold != 0.8 || c.Context.KeepLastTurns != 2 ||
		c.Tools.Bash.Timeout != 10*time.Minute || c.Sessions.Dir != ".mm/sessions" || len(c.Tools.Sensitive) != 9 ||
		c.LSP.Timeout != 30*time.Second {
		t.Errorf("defaults = %+v", c)
	}
	if err := c.validate(); err != nil {
		t.Error(err)
	}
}

// TestEveryKeyIsCommented keeps default.yaml the documented source of truth.
func TestEveryKeyIsCommented(t *testing.T) {
	for _, k := range leafKeys(t, defaultYAML) {
		if k.comment == "" {
			t.Errorf("key %s (line %d) has no comment", k.name, k.line)
		}
	}
}

type key struct {
	name, comment string
	line          int
}

func leafKeys(t *testing.T, data []byte) []key {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		t.Fatal(err)
	}
	var out []key
	var walk func(n *yaml.Node, prefix, inherited string)
	walk = func(n *yaml.Node, prefix, inherited string) {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			name := prefix + k.Value
			// An empty mapping (lsp.servers: {}) is a key of its own.
			if v.Kind == yaml.MappingNode && len(v.Content) > 0 {
				walk(v, name+".", k.HeadComment)
				continue
			}
			c := k.HeadComment
			if c == "" && i == 0 {
				c = inherited
			}
			out = append(out, key{name: name, comment: c, line: k.Line})
		}
	}
	walk(root.Content[0], "", "")
	return out
}

func TestLayering(t *testing.T) {
	c, err := Parse([]byte("model:\n  provider: scripted\nturns:\n  concurrency: 4\n"), "user.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Model.Provider != "scripted" || c.Turns.Concurrency != 4 || c.Model.BaseURL != "http://127.0.0.1:8080/v1" || c.Turns.MaxModelCalls != 200 {
		t.Errorf("layered = %+v", c)
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"modle: {}\n", `unknown key "modle" (line 1)`},
		{"tools:\n  bash:\n    timout: 1s\n", `unknown key "tools.bash.timout" (line 3)`},
		{"turns:\n  concurrency: 0\n", "turns.concurrency: must be at least 1"},
		{"lsp:\n  timeout: 0s\n", "lsp.timeout: must be positive"},
		{"model:\n  provider: gpt\n", `unknown provider "gpt"`},
		{"turns: [1, 2]\n", "user.yaml"},
		{"tools:\n  bash:\n    timeout: soon\n", "user.yaml"},
		{"serve:\n  listen: 8765\n", "serve.listen"},
		{"serve:\n  tokens: [{name: a, token: short}]\n", "serve.tokens[0].token: must be unique and at least 16"},
		{"serve:\n  tokens: [{name: a, token: 0123456789abcdef}, {name: a, token: 0123456789abcdeg}]\n", "serve.tokens[1].name"},
		{"serve:\n  allowedOrigins: [\"https://x.example/app\"]\n", "serve.allowedOrigins[0]"},
		{"serve:\n  maxConnections: 0\n", "serve.maxConnections"},
		{"serve:\n  stallTimeout: 0s\n", "serve.stallTimeout"},
		{"serve:\n  tls: {cert: c.pem}\n", "serve.tls: give both"},
		{"store:\n  url: postgres://db/mm\n", "store.url: keeps sessions only when they are kept: set sessions.enabled: true"},
		{"sessions: {enabled: true}\nstore:\n  url: mysql://db/mm\n", "store.url: must be a postgres:// URL"},
		{"cluster:\n  name: mm\n", "cluster.advertise: needed"},
		{"cluster:\n  name: m m\n  advertise: :4020\n", "cluster.name"},
		{"cluster:\n  name: mm\n  advertise: 0.0.0.0:4020\n  peers: [a:6330]\n", "cluster.advertise"},
		{"cluster:\n  name: mm\n  advertise: \"[::1]:4020\"\n  peers: [a:6330]\n", "cluster.advertise"},
		{"cluster:\n  name: mm\n  advertise: :4020\n", "cluster.peers: the automanaged provider needs"},
		{"cluster:\n  name: mm\n  advertise: :4020\n  peers: [a]\n", "cluster.peers[0]"},
		{"cluster:\n  name: mm\n  advertise: :6330\n  peers: [a:6330]\n", "cluster.healthPort"},
		{"cluster:\n  name: mm\n  advertise: :4020\n  peers: [a:6330]\n  failureTimeout: 100ms\n", "cluster.failureTimeout"},
		{"cluster:\n  name: mm\n  advertise: :4020\n  provider: zk\n", "cluster.provider"},
		{"cluster:\n  name: mm\n  advertise: :4020\n  peers: [a:6330]\n  placement: near\n", `cluster.placement: unknown placement "near" (balanced, local, spread)`},
		{"cluster:\n  name: mm\n  advertise: :4020\n  peers: [a:6330]\n  streamPort: 70000\n", "cluster.streamPort: must be a port"},
		{"cluster:\n  name: mm\n  advertise: :4020\n  peers: [a:6330]\n  streamPort: 4020\n", "cluster.streamPort: is advertise's port too"},
		{"cluster:\n  name: mm\n  advertise: :4020\n  peers: [a:6330]\n  streamPort: 6330\n", "cluster.streamPort: is healthPort too"},
		{"cluster:\n  name: mm\n  advertise: :4020\n  provider: etcd\n  etcd: {endpoints: []}\n", "cluster.etcd.endpoints"},
		{"cluster:\n  name: mm\n  advertise: :4020\n  provider: k8s\n", "cluster.tls: is needed: without the nodes' mutual TLS"},
		// On loopback too: every program of the machine reaches the port.
		{"cluster:\n  name: mm\n  advertise: 127.0.0.1:4020\n  peers: [\"127.0.0.1:6330\"]\n", "`mm cluster-certs DIR` makes the three files"},
		{"cluster:\n  name: mm\n  advertise: 10.0.0.1:4020\n  provider: k8s\n  tls: {cert: a.pem, key: a-key.pem}\n", "cluster.tls: needs cert, key and ca"},
	} {
		_, err := Parse([]byte(tc.yaml), "user.yaml")
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "user.yaml") {
			t.Errorf("%q: err = %v, want %q naming the file", tc.yaml, err, tc.want)
		}
	}
}

// tlsYAML continues a cluster block with the nodes' mutual TLS.
const tlsYAML = "  tls: {cert: node.pem, key: node-key.pem, ca: ca.pem}\n"

// TestCluster: without a name the block is not checked (mm runs as one
// process); with one, each provider's settings are taken as written.
func TestCluster(t *testing.T) {
	c, err := Parse([]byte("cluster:\n  advertise: nonsense\n"), "user.yaml")
	if err != nil || c.Cluster.Enabled() {
		t.Fatalf("no name: %v, enabled %v", err, c.Cluster.Enabled())
	}
	for _, y := range []string{
		"cluster:\n  name: mm\n  advertise: 127.0.0.1:0\n  peers: [\"127.0.0.1:16330\"]\n  failureTimeout: 2s\n" + tlsYAML,
		"cluster:\n  name: mm\n  advertise: mm1:4020\n  provider: etcd\n  etcd: {endpoints: [\"etcd:2379\"]}\n" + tlsYAML,
		"cluster:\n  name: mm\n  advertise: :4020\n  provider: consul\n" + tlsYAML,
		"cluster:\n  name: mm\n  advertise: :4020\n  provider: k8s\n" + tlsYAML,
		"cluster:\n  name: mm\n  advertise: localhost:4020\n  peers: [\"localhost:6330\"]\n" + tlsYAML,
	} {
		c, err := Parse([]byte(y), "user.yaml")
		if err != nil || !c.Cluster.Enabled() {
			t.Errorf("%q: %v", y, err)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("MM_CONFIG", "")
	c, err := Load("")
	if err != nil || c.Path != "" {
		t.Fatalf("no user file: %v %q", err, c.Path)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("an explicit missing file is not an error")
	}
	p := filepath.Join(dir, ".config", "mm", "config.yaml")
	_ = os.MkdirAll(filepath.Dir(p), 0o755)
	_ = os.WriteFile(p, []byte("yolo: false\n"), 0o644)
	c, err = Load("")
	if err != nil || c.Yolo || c.Path != p {
		t.Fatalf("home file: %v %+v", err, c)
	}
	env := filepath.Join(dir, "env.yaml")
	_ = os.WriteFile(env, []byte("acp:\n  name: envbob\n"), 0o644)
	t.Setenv("MM_CONFIG", env)
	c, err = Load("")
	if err != nil || c.ACP.Name != "envbob" || !c.Yolo {
		t.Fatalf("MM_CONFIG: %v %+v", err, c)
	}
}

func TestEnvOverrides(t *testing.T) {
	t.Setenv("OPENAI_BASE_URL", "http://10.0.0.1:1234/v1")
	t.Setenv("OLLAMA_HOST", "127.0.0.1:11434")
	if got := (Model{Provider: "openai", BaseURL: "x"}).ResolvedBaseURL(); got != "http://10.0.0.1:1234/v1" {
		t.Error(got)
	}
	if got := (Model{Provider: "ollama", BaseURL: "x"}).ResolvedBaseURL(); got != "http://127.0.0.1:11434" {
		t.Error(got)
	}
	t.Setenv("MY_KEY", "sk-1")
	if (Model{APIKeyEnv: "MY_KEY"}).APIKey() != "sk-1" || (Model{}).APIKey() != "" {
		t.Error("APIKey")
	}
}

// TestSystemPromptSections: the full prompt holds each section a model
// acts on, the compact one the same rules in fewer words, and both stay
// within their token budgets (four bytes a token, as mm estimates).
func TestSystemPromptSections(t *testing.T) {
	full, compact := SystemPrompt(false), SystemPrompt(true)
	for _, h := range []string{"# Finish the task", "# Workflow", "# Editing files", "# Using the tools", "# When something fails", "# Git and safety", "# Communication"} {
		if !strings.Contains(full, "\n"+h+"\n") {
			t.Errorf("the full prompt has no section %q", h)
		}
	}
	for _, rule := range []string{"Keep going", "`plan`", "`edit_file`", "`rg`", "narrowest", "Never repeat", "uncommitted work", "path:line"} {
		if !strings.Contains(compact, rule) || !strings.Contains(full, rule) {
			t.Errorf("a prompt lacks %q", rule)
		}
	}
	if n := len(full) / 4; n > 1500 {
		t.Errorf("the full prompt is about %d tokens, over its budget of 1,500", n)
	}
	if n := len(compact) / 4; n > 400 {
		t.Errorf("the compact prompt is about %d tokens, over its budget of 400", n)
	}
	if !strings.HasPrefix(CompactRequest(), "Summarise the conversation below") {
		t.Error("the compaction request must start with the words scripts match on")
	}
}

func TestExamplesParse(t *testing.T) {
	files, _ := filepath.Glob("examples/*.yaml")
	if len(files) < 5 {
		t.Fatalf("examples: %v", files)
	}
	for _, f := range files {
		if _, err := Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestModels(t *testing.T) {
	c, err := Parse([]byte("model:\n  provider: openai\n  baseURL: http://a/v1\nmodels:\n  - {id: big, name: qwen-32b}\n  - {id: demo, provider: scripted}\n"), "user.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Models) != 2 || c.Models[0].Provider != "openai" || c.Models[0].BaseURL != "http://a/v1" || c.Models[0].Name != "qwen-32b" || c.Models[1].Provider != "scripted" {
		t.Errorf("models = %+v", c.Models)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"models:\n  - {name: x}\n", "models[0].id"},
		{"models:\n  - {id: default}\n", "models[0].id"},
		{"models:\n  - {id: a}\n  - {id: a}\n", "models[1].id"},
		{"models:\n  - {id: a, nmae: x}\n", `unknown key "models[0].nmae"`},
	} {
		if _, err := Parse([]byte(tc.yaml), "user.yaml"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

// TestDurationWithoutUnit: a duration written as a bare number is an error
// that says how to write it, not ten nanoseconds.
func TestDurationWithoutUnit(t *testing.T) {
	_, err := Parse([]byte("tools:\n  bash:\n    timeout: 10\n"), "user.yaml")
	if err == nil || !strings.Contains(err.Error(), "tools.bash.timeout: 10 is not a duration") || !strings.Contains(err.Error(), "10s") {
		t.Fatalf("got %v", err)
	}
	c, err := Parse([]byte("hooks:\n  timeout: 10s\n"), "user.yaml")
	if err != nil || c.Hooks.Timeout != 10*time.Second {
		t.Fatalf("10s: %v, %v", c, err)
	}
}

// TestBaseURLFromFile: the environment overrides the default URL, never
// one the user's file wrote; the source is told.
func TestBaseURLFromFile(t *testing.T) {
	t.Setenv("OPENAI_BASE_URL", "http://env:1/v1")
	c, err := Parse([]byte("model:\n  name: x\n"), "user.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if url, from := c.Model.BaseURLSource(); url != "http://env:1/v1" || from != "OPENAI_BASE_URL" {
		t.Errorf("default URL: %s from %s", url, from)
	}
	c, err = Parse([]byte("model:\n  baseURL: http://file:2/v1\nmodels:\n  - {id: big}\n  - {id: far, baseURL: http://far:3/v1}\n"), "user.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if url, from := c.Model.BaseURLSource(); url != "http://file:2/v1" || from != "user.yaml" {
		t.Errorf("file URL: %s from %s", url, from)
	}
	if url := c.Models[0].ResolvedBaseURL(); url != "http://file:2/v1" {
		t.Errorf("inherited URL: %s", url)
	}
	if url := c.Models[1].ResolvedBaseURL(); url != "http://far:3/v1" {
		t.Errorf("own URL: %s", url)
	}
	if url, from := Default().Model.BaseURLSource(); url != "http://env:1/v1" || from != "OPENAI_BASE_URL" {
		t.Errorf("embedded default: %s from %s", url, from)
	}
}

// TestScriptRelativeToConfigFile: model.script and models[].script are
// found next to the config file that names them, whatever directory mm
// was started in (an editor starts it in the project); an absolute path is
// kept and "~/" is the home directory, as elsewhere in the config.
func TestScriptRelativeToConfigFile(t *testing.T) {
	dir := t.TempDir()
	home := t.TempDir()
	t.Setenv("HOME", home)
	cfgDir := filepath.Join(dir, "conf")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	abs := filepath.Join(dir, "elsewhere", "abs.yaml")
	path := filepath.Join(cfgDir, "config.yaml")
	yml := "model:\n  provider: scripted\n  script: scripts/demo.yaml\nmodels:\n" +
		"  - {id: abs, script: " + abs + "}\n" +
		"  - {id: home, script: ~/s.yaml}\n" +
		"  - {id: up, script: ../up.yaml}\n" +
		"  - {id: none}\n"
	if err := os.WriteFile(path, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	// The process works elsewhere, as under an editor; the config path is
	// given relative to it, so that the file's own directory must be made
	// absolute too.
	t.Chdir(dir)
	c, err := Load(filepath.Join("conf", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"default": filepath.Join(cfgDir, "scripts", "demo.yaml"),
		"abs":     abs,
		"home":    filepath.Join(home, "s.yaml"),
		"up":      filepath.Join(dir, "up.yaml"),
		"none":    "",
	}
	got := map[string]string{"default": c.Model.Script}
	for _, m := range c.Models {
		got[m.ID] = m.Script
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("%s: script = %q, want %q", id, got[id], w)
		}
	}
	if d := Default(); d.Model.Script != "" {
		t.Errorf("the embedded default names a script: %q", d.Model.Script)
	}
}

// TestExampleScriptsExist: every scripted example's script is found from
// the example alone, wherever the tests run.
func TestExampleScriptsExist(t *testing.T) {
	files, _ := filepath.Glob("examples/*.yaml")
	if len(files) == 0 {
		t.Fatal("no examples")
	}
	for i := range files {
		files[i], _ = filepath.Abs(files[i]) // the loop changes directory
	}
	for _, f := range files {
		c, err := Load(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if c.Model.Provider != "scripted" || c.Model.Script == "" {
			continue
		}
		// Another working directory, as an editor's: the script must
		// not depend on the one the tests run in.
		t.Chdir(t.TempDir())
		if _, err := os.Stat(c.Model.Script); err != nil {
			t.Errorf("%s: model.script: %v", f, err)
		}
	}
}

// TestServePaths: serve's files and roots are found next to the config
// file that names them, and no root means the start directory.
func TestServePaths(t *testing.T) {
	c, err := Parse([]byte("serve:\n  roots: [proj, /abs]\n  tls: {cert: c.pem, key: /k.pem}\n"), "/etc/mm/user.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Serve.TLS.Cert != "/etc/mm/c.pem" || c.Serve.TLS.Key != "/k.pem" {
		t.Errorf("tls = %+v", c.Serve.TLS)
	}
	if got := c.Serve.ServeRoots("/start"); strings.Join(got, ",") != "/etc/mm/proj,/abs" {
		t.Errorf("roots = %v", got)
	}
	if got := Default().Serve.ServeRoots("/start/"); len(got) != 1 || got[0] != "/start" {
		t.Errorf("default roots = %v", got)
	}
}
