package configs

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

//go:embed default.yaml
var defaultYAML []byte

// DefaultYAML returns the embedded default configuration text.
func DefaultYAML() []byte { return defaultYAML }

// Config is the whole configuration. Its yaml tags are the keys of
// default.yaml; a key that has no field here is rejected.
type Config struct {
	ACP    ACP    `yaml:"acp"`
	Model  Model  `yaml:"model"`
	Prompt Prompt `yaml:"prompt"`
	// Instructions are the project's instruction files (AGENTS.md).
	Instructions Instructions `yaml:"instructions"`
	Yolo         bool         `yaml:"yolo"`
	Sessions     Sessions     `yaml:"sessions"`
	Store        Store        `yaml:"store"`
	Context      Context      `yaml:"context"`
	Turns        Turns        `yaml:"turns"`
	Tools        Tools        `yaml:"tools"`
	Sandbox      Sandbox      `yaml:"sandbox"`
	Skills       Skills       `yaml:"skills"`
	Hooks        Hooks        `yaml:"hooks"`
	// Agents are the ACP agents ask_agent, /ask and mm --ask can reach.
	Agents []Agent `yaml:"agents"`
	MCP    MCP     `yaml:"mcp"`
	LSP    LSP     `yaml:"lsp"`
	// Models are the other models a session may switch to
	// (session/set_config_option); the model above is "default".
	Models []NamedModel `yaml:"models"`
	// Serve configures `mm serve`, ACP over the network.
	Serve Serve `yaml:"serve"`
	// Cluster makes `mm serve` a node of a protoactor cluster; an empty
	// name keeps it one process.
	Cluster Cluster `yaml:"cluster"`

	// Path is the user file that was layered on the defaults, "" if none.
	Path string `yaml:"-"`
}

// ACP is the agent's identity in the initialize response, and how the
// connection reads.
type ACP struct {
	Name  string `yaml:"name"`
	Title string `yaml:"title"`
	// MaxLineBytes is the longest JSON-RPC line read from the client.
	MaxLineBytes Bytes `yaml:"maxLineBytes"`
	// MaxPending is how many requests of one connection may be read and
	// not yet answered; past it, mm stops reading until one is answered.
	MaxPending int `yaml:"maxPending"`
}

// Model selects and tunes the model provider.
type Model struct {
	Provider      string  `yaml:"provider"`
	BaseURL       string  `yaml:"baseURL"`
	Name          string  `yaml:"name"`
	APIKeyEnv     string  `yaml:"apiKeyEnv"`
	Temperature   float64 `yaml:"temperature"`
	MaxTokens     int     `yaml:"maxTokens"`
	ContextWindow int     `yaml:"contextWindow"`
	// Script is the scripted provider's YAML script. Load makes it
	// absolute: a relative path is relative to the config file that
	// names it, "~/" is the home directory; "" is the embedded script.
	Script string `yaml:"script"`
	// Vision says the model takes images: image blocks of a prompt reach
	// it as image parts (and promptCapabilities.image is advertised).
	Vision bool `yaml:"vision"`
	// IdleTimeout ends a model call that receives nothing this long; 0
	// means never.
	IdleTimeout time.Duration `yaml:"idleTimeout"`
	// Retries is how many times a call refused before any byte was
	// streamed (HTTP 429, 502, 503, 529, connection refused) is tried again.
	Retries int `yaml:"retries"`
	// WarmUp readies the models (a pooled connection, the first call's
	// code, the window probe) while nobody waits; the main model's value
	// applies to every model.
	WarmUp bool `yaml:"warmUp"`

	// BaseURLFrom is the config file that wrote baseURL, "" when it is the
	// embedded default's: only the default gives way to OPENAI_BASE_URL
	// and OLLAMA_HOST.
	BaseURLFrom string `yaml:"-"`
}

// Prompt configures how a prompt's content blocks become the user message.
type Prompt struct {
	// MaxResourceBytes is how much of an embedded resource's text is
	// inlined; the rest is cut with a note.
	MaxResourceBytes Bytes `yaml:"maxResourceBytes"`
	// MaxTextBytes is the most text a prompt may bring into the history:
	// what the user typed plus what its embedded resources inline (each
	// already cut at MaxResourceBytes). A larger prompt is refused whole.
	MaxTextBytes Bytes `yaml:"maxTextBytes"`
	// SystemFile is the user's own Markdown for the system prompt, ""
	// for none; Load makes it absolute, as model.script.
	SystemFile string `yaml:"systemFile"`
	// SystemMode says what SystemFile does: "extend" (it follows mm's
	// prompt) or "replace" (it takes its place).
	SystemMode string `yaml:"systemMode"`
	// CompactBelow is the context window, in tokens, below which a
	// session gets mm's compact prompt; 0 means never.
	CompactBelow int `yaml:"compactBelow"`
}

// Instructions configures the project instructions read into the system
// prompt (AGENTS.md and the like).
type Instructions struct {
	// Files are the names looked for in each folder, the first present
	// taken.
	Files []string `yaml:"files"`
	// MaxBytes bounds the instructions of the system prompt, all files
	// together, and each subfolder's file; 0 reads none.
	MaxBytes Bytes `yaml:"maxBytes"`
}

// NamedModel is one entry of models: an id and a model block. Empty
// provider, baseURL and apiKeyEnv are taken from the main model.
type NamedModel struct {
	ID    string `yaml:"id"`
	Model `yaml:",inline"`
}

// Sessions configures persistence.
type Sessions struct {
	Enabled bool   `yaml:"enabled"`
	Dir     string `yaml:"dir"`
	// MaxFileBytes is the largest session file read (load, resume, fork,
	// list); a larger one, like anything that is not a regular file, is
	// refused.
	MaxFileBytes Bytes `yaml:"maxFileBytes"`
}

// Store says where sessions are kept when sessions.enabled is set.
type Store struct {
	// URL, when set (postgres://…), keeps them in that PostgreSQL
	// database, shared by every mm that names it; empty keeps them in
	// files under each session's cwd.
	URL string `yaml:"url"`
}

// Context configures history compression.
type Context struct {
	Threshold     float64 `yaml:"threshold"`
	KeepLastTurns int     `yaml:"keepLastTurns"`
}

// Turns configures the turn serializer and the agent loop.
type Turns struct {
	Concurrency   int `yaml:"concurrency"`
	MaxModelCalls int `yaml:"maxModelCalls"`
	// MaxRepeats is how many identical calls in a row (same tool, same
	// arguments, one turn) run; the next ones are not run again.
	MaxRepeats int `yaml:"maxRepeats"`
}

// Skills configures the skill catalog.
type Skills struct {
	// Dirs are searched in order, a later one overriding an earlier one's
	// skill of the same name; "~" is the home directory, a relative dir is
	// relative to the session's cwd.
	Dirs []string `yaml:"dirs"`
}

// Agent is an ACP agent mm can ask: the command that serves ACP on its
// stdio.
type Agent struct {
	Name    string            `yaml:"name"`
	Command string            `yaml:"command"`
	Args    []string          `yaml:"args"`
	Env     map[string]string `yaml:"env"`
}

// LSP configures the language servers of the lsp tool.
type LSP struct {
	// Servers maps a language (go, python, typescript, rust, …) to the
	// command line that starts its server on stdio.
	Servers map[string]string `yaml:"servers"`
	// Timeout bounds one lsp call, and each write to a server: a server
	// that has not answered by then ends the call with an error, one that
	// read nothing of a write for that long is stopped.
	Timeout time.Duration `yaml:"timeout"`
}

// MCP configures the MCP servers every session connects to, besides the
// ones its editor passes.
type MCP struct {
	Servers []MCPServer `yaml:"servers"`
	// Timeout bounds one tools/call, unless the server sets its own.
	Timeout time.Duration `yaml:"timeout"`
	// MaxTools is how many tools of one server are offered at most.
	MaxTools int `yaml:"maxTools"`
}

// MCPServer is one MCP server: a command (stdio) or a URL (streamable
// HTTP). Permissions "ask" makes every call of its tools ask the user.
type MCPServer struct {
	Name        string            `yaml:"name"`
	Command     string            `yaml:"command"`
	Args        []string          `yaml:"args"`
	Env         map[string]string `yaml:"env"`
	URL         string            `yaml:"url"`
	Headers     map[string]string `yaml:"headers"`
	Permissions string            `yaml:"permissions"`
	// Timeout, when set, replaces mcp.timeout for this server's calls.
	Timeout time.Duration `yaml:"timeout"`
}

// Hooks configures the shell commands run at points of a turn.
type Hooks struct {
	PreToolCall []string      `yaml:"preToolCall"`
	PostAsk     []string      `yaml:"postAsk"`
	Timeout     time.Duration `yaml:"timeout"`
}

// Tools configures the built-in tools.
type Tools struct {
	Bash      Bash       `yaml:"bash"`
	Fetch     Fetch      `yaml:"fetch"`
	Output    ToolOutput `yaml:"output"`
	Sensitive []string   `yaml:"sensitive"`
}

// ToolOutput sizes what the model reads of a tool's result: a tenth of the
// context window, within MinBytes and MaxBytes; a longer output is cut,
// and kept whole in the session's folder, which holds KeepBytes at most.
type ToolOutput struct {
	MinBytes  Bytes `yaml:"minBytes"`
	MaxBytes  Bytes `yaml:"maxBytes"`
	KeepBytes Bytes `yaml:"keepBytes"`
}

// Sandbox is what the commands mm starts for a session may touch
// (package sandbox): Mode is "", read-only, workspace-write or full.
type Sandbox struct {
	Mode    string `yaml:"mode"`
	Network bool   `yaml:"network"`
	// ProtectGit keeps the .git folder at the top of a session's cwd
	// read-only in workspace-write (the agent cannot commit).
	ProtectGit bool `yaml:"protectGit"`
	// With is how commands are confined: "" the best this machine has,
	// "bubblewrap" or "landlock" (mm refuses to start without it).
	With string `yaml:"with"`
	// User is whom confined commands run as when mm runs as root: a
	// name, a uid or uid:gid; never root.
	User string `yaml:"user"`
	// Env names the variables of mm's environment a confined command
	// gets (a name, or a prefix ending in *), and NAME=value entries set
	// one.
	Env []string `yaml:"env"`
}

// Serve configures `mm serve`: where it listens, who may connect, and the
// bounds of each connection.
type Serve struct {
	Listen string `yaml:"listen"`
	// Tokens are the bearer tokens let in, each with the name that owns
	// the sessions it creates.
	Tokens []ServeToken `yaml:"tokens"`
	// Roots are the folders a session's cwd must be in (absolute once
	// loaded from a file); empty means the directory mm serve starts in
	// (ServeRoots).
	Roots []string `yaml:"roots"`
	// SharedFolders are folders under the roots (absolute once loaded
	// from a file) that every token may open sessions in and none owns;
	// every other folder is its first token's (docs/sandbox.md).
	SharedFolders []string `yaml:"sharedFolders"`
	// AllowedOrigins are the Origin header values let in
	// (scheme://host[:port]); a request with any other is refused.
	AllowedOrigins []string `yaml:"allowedOrigins"`
	MaxConnections int      `yaml:"maxConnections"`
	// MaxMessageBytes bounds one client message over the network (a
	// WebSocket message, a POST's body); stdio keeps acp.maxLineBytes.
	MaxMessageBytes Bytes `yaml:"maxMessageBytes"`
	// MaxIncomingBytes bounds the bytes of client messages being read at
	// once, over every connection.
	MaxIncomingBytes Bytes `yaml:"maxIncomingBytes"`
	// MaxSessionsPerToken bounds a token's live sessions, and
	// MaxMCPProcessesPerToken the MCP server processes they run.
	MaxSessionsPerToken     int `yaml:"maxSessionsPerToken"`
	MaxMCPProcessesPerToken int `yaml:"maxMCPProcessesPerToken"`
	// DetachedIdle stops a session no connection has held this long
	// (sessions.enabled: it stays loadable); 0 keeps it.
	DetachedIdle time.Duration `yaml:"detachedIdle"`
	// MessageTimeout is how long one client message may take to arrive
	// whole.
	MessageTimeout time.Duration `yaml:"messageTimeout"`
	StallTimeout   time.Duration `yaml:"stallTimeout"`
	DrainTimeout   time.Duration `yaml:"drainTimeout"`
	// ResumeTimeout is how long a resumable WebSocket connection whose
	// socket dropped waits for its client; ResumeWindowBytes bounds the
	// frames it keeps for the resume.
	ResumeTimeout     time.Duration `yaml:"resumeTimeout"`
	ResumeWindowBytes Bytes         `yaml:"resumeWindowBytes"`
	TLS               ServeTLS      `yaml:"tls"`
}

// ServeToken is one bearer token and its owner's name.
type ServeToken struct {
	Name  string `yaml:"name"`
	Token string `yaml:"token"`
}

// ServeTLS names the certificate and key of https and wss; both empty
// serves plain HTTP.
type ServeTLS struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// ServeRoots returns the folders served sessions must stay in: the
// configured roots, or dir (the directory mm serve starts in) when none is.
func (s Serve) ServeRoots(dir string) []string {
	if len(s.Roots) == 0 {
		return []string{filepath.Clean(dir)}
	}
	out := make([]string, len(s.Roots))
	for i, r := range s.Roots {
		out[i] = filepath.Clean(r)
	}
	return out
}

// Cluster configures the membership of `mm serve` in a protoactor
// cluster (package grains). Nothing in it applies while Name is empty.
type Cluster struct {
	// Name is the cluster joined; members of other names are ignored.
	Name string `yaml:"name"`
	// Provider finds the members: automanaged, etcd, consul or k8s.
	Provider string `yaml:"provider"`
	// Advertise is the host:port other nodes reach this node's remote on,
	// and where it listens. An empty host is this machine's hostname; port
	// 0 picks a free one.
	Advertise string `yaml:"advertise"`
	// Peers are the automanaged health endpoints (host:port) polled for
	// members; this node's own is added when missing.
	Peers []string `yaml:"peers"`
	// HealthPort is where the automanaged provider answers its peers, on
	// Advertise's host.
	HealthPort int `yaml:"healthPort"`
	// FailureTimeout is how long a member that stopped answering stays a
	// member.
	FailureTimeout time.Duration `yaml:"failureTimeout"`
	// Placement is where a session a client opens lives:
	// PlacementBalanced, PlacementLocal or PlacementSpread.
	Placement  string        `yaml:"placement"`
	StreamPort int           `yaml:"streamPort"`
	Etcd       ClusterEtcd   `yaml:"etcd"`
	Consul     ClusterConsul `yaml:"consul"`
	// TLS is the nodes' mutual TLS; required unless Advertise is a
	// loopback address.
	TLS ClusterTLS `yaml:"tls"`
}

// ClusterTLS is how the nodes of a cluster prove to each other that they
// are its members: each node's certificate and key, and the cluster's CA
// that signed them (PEM files). Any certificate the CA signed is a member.
type ClusterTLS struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	CA   string `yaml:"ca"`
}

// Enabled says whether any of the files is named.
func (t ClusterTLS) Enabled() bool { return t.Cert != "" || t.Key != "" || t.CA != "" }

// Enabled says whether mm serve joins a cluster.
func (c Cluster) Enabled() bool { return c.Name != "" }

// ClusterEtcd is the etcd provider's connection.
type ClusterEtcd struct {
	Endpoints []string `yaml:"endpoints"`
	// Prefix is the key under which members register, as
	// <prefix>/<cluster name>/<member>.
	Prefix string `yaml:"prefix"`
}

// ClusterConsul is the consul provider's connection.
type ClusterConsul struct {
	// Address of the Consul agent (host:port); empty means
	// CONSUL_HTTP_ADDR, else 127.0.0.1:8500.
	Address string `yaml:"address"`
}

// Fetch configures fetch_content.
type Fetch struct {
	Timeout      time.Duration `yaml:"timeout"`
	MaxRedirects int           `yaml:"maxRedirects"`
	MaxBytes     Bytes         `yaml:"maxBytes"`
}

// Bash configures the bash tool.
type Bash struct {
	Timeout time.Duration `yaml:"timeout"`
}

// ErrConfig marks every configuration error.
var ErrConfig = errors.New("config")

// defaultName names the embedded file in errors.
const defaultName = "(embedded default.yaml)"

// The values of cluster.placement (docs/cluster.md#placement).
const (
	// PlacementBalanced: on the node the client is connected to, while
	// that node holds no more than its share of the sessions and a
	// margin; spread past it.
	PlacementBalanced = "balanced"
	// PlacementLocal: on the node the client is connected to (its id is
	// chosen so).
	PlacementLocal = "local"
	// PlacementSpread: over the members, by its id.
	PlacementSpread = "spread"
)

// Default returns the embedded configuration alone.
//
// It is default.yaml as Go (default_gen.go), not decoded at each start:
// decoding the file took 0.5–0.8 ms of the 7–8 ms an editor waits for mm
// to answer initialize, on every start. TestDefaultsGenerated checks that
// the two say the same, and writes default_gen.go again with -update.
func Default() *Config { return generatedDefault() }

// decodedDefault is the embedded default.yaml decoded.
func decodedDefault() (*Config, error) {
	c := &Config{}
	if err := decode(c, defaultYAML, defaultName); err != nil {
		return nil, err
	}
	return c, nil
}

// Load layers the user file at path on the embedded defaults. An empty path
// means MM_CONFIG, then ~/.config/mm/config.yaml; a default location that does
// not exist is not an error, an explicit one is.
func Load(path string) (*Config, error) {
	c := Default()
	explicit := path != ""
	if !explicit {
		path = os.Getenv("MM_CONFIG")
		explicit = path != ""
	}
	if !explicit {
		home, err := os.UserHomeDir()
		if err != nil {
			return c, nil
		}
		path = filepath.Join(home, ".config", "mm", "config.yaml")
	}
	// Absolute, so that what mm hides of its config from the commands it
	// runs (docs/sandbox.md) is the file, however its path was written.
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	data, err := os.ReadFile(path)
	if err != nil {
		if !explicit && errors.Is(err, os.ErrNotExist) {
			return c, nil
		}
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if err := decode(c, data, path); err != nil {
		return nil, err
	}
	c.Path = path
	return c, c.validate()
}

// userURLs records which model URLs the user file wrote, so that the
// environment overrides only the default's (Model.BaseURLSource).
func userURLs(c *Config, root *yaml.Node, name string) {
	if root.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i].Value, root.Content[i+1]
		switch {
		case k == "model" && hasKey(v, "baseURL"):
			c.Model.BaseURLFrom = name
		case k == "models" && v.Kind == yaml.SequenceNode:
			for j, item := range v.Content {
				if j < len(c.Models) && hasKey(item, "baseURL") {
					c.Models[j].BaseURLFrom = name
				}
			}
		}
	}
}

func hasKey(n *yaml.Node, key string) bool {
	if n.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return true
		}
	}
	return false
}

// Parse layers YAML text on the defaults; name is used in errors.
func Parse(data []byte, name string) (*Config, error) {
	c := Default()
	if err := decode(c, data, name); err != nil {
		return nil, err
	}
	c.Path = name
	return c, c.validate()
}

func decode(c *Config, data []byte, name string) error {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return fmt.Errorf("%w %s: %v", ErrConfig, name, err)
	}
	if len(root.Content) == 0 {
		return nil // an empty file changes nothing
	}
	if err := checkKeys(root.Content[0], reflect.TypeOf(*c), ""); err != nil {
		return fmt.Errorf("%w %s: %v", ErrConfig, name, err)
	}
	if err := root.Decode(c); err != nil {
		return fmt.Errorf("%w %s: %v", ErrConfig, name, strings.ReplaceAll(err.Error(), "\n", " "))
	}
	if name != defaultName {
		userURLs(c, root.Content[0], name)
		return resolvePaths(c, name)
	}
	return nil
}

var durationType = reflect.TypeOf(time.Duration(0))

// checkKeys walks a mapping node against a struct type so that an unknown key
// is reported with its full dotted name and line.
func checkKeys(n *yaml.Node, t reflect.Type, prefix string) error {
	if t.Kind() != reflect.Struct || n.Kind != yaml.MappingNode {
		return nil
	}
	fields := map[string]reflect.Type{}
	var collect func(t reflect.Type)
	collect = func(t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			parts := strings.Split(t.Field(i).Tag.Get("yaml"), ",")
			if len(parts) > 1 && parts[1] == "inline" {
				collect(t.Field(i).Type)
				continue
			}
			if parts[0] != "" && parts[0] != "-" {
				fields[parts[0]] = t.Field(i).Type
			}
		}
	}
	collect(t)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		ft, ok := fields[k.Value]
		if !ok {
			return fmt.Errorf("unknown key %q (line %d)", prefix+k.Value, k.Line)
		}
		v := n.Content[i+1]
		if ft == durationType && v.Kind == yaml.ScalarNode && (v.Tag == "!!int" || v.Tag == "!!float") {
			return fmt.Errorf("%s: %s is not a duration (line %d): write it with its unit, e.g. %ss or %sm", prefix+k.Value, v.Value, v.Line, v.Value, v.Value)
		}
		if ft.Kind() == reflect.Slice && v.Kind == yaml.SequenceNode {
			for j, item := range v.Content {
				if err := checkKeys(item, ft.Elem(), fmt.Sprintf("%s%s[%d].", prefix, k.Value, j)); err != nil {
					return err
				}
			}
			continue
		}
		if err := checkKeys(v, ft, prefix+k.Value+"."); err != nil {
			return err
		}
	}
	return nil
}

// ResolvedBaseURL returns the model server URL: the one a config file
// wrote, else OPENAI_BASE_URL (openai) or OLLAMA_HOST (ollama), else the
// default.
func (m Model) ResolvedBaseURL() string {
	url, _ := m.BaseURLSource()
	return url
}

// BaseURLSource returns ResolvedBaseURL and where it came from: the config
// file's path, the environment variable's name, or "default".
func (m Model) BaseURLSource() (url, from string) {
	if m.BaseURLFrom != "" {
		return m.BaseURL, m.BaseURLFrom
	}
	switch m.Provider {
	case "openai":
		if v := os.Getenv("OPENAI_BASE_URL"); v != "" {
			return v, "OPENAI_BASE_URL"
		}
	case "ollama":
		if v := os.Getenv("OLLAMA_HOST"); v != "" {
			if !strings.Contains(v, "://") {
				v = "http://" + v
			}
			return v, "OLLAMA_HOST"
		}
	}
	return m.BaseURL, "default"
}

// APIKey returns the key from the configured environment variable, or "".
func (m Model) APIKey() string {
	if m.APIKeyEnv == "" {
		return ""
	}
	return os.Getenv(m.APIKeyEnv)
}

// What the model reads that is mm's own (docs/models.md): the system
// prompt in its two sizes, the request for a compaction summary, and the
// note of a turn's last model call. The tests of package prompt keep a
// golden copy of the system message they make.
var (
	//go:embed system.md
	systemPrompt string
	//go:embed system-compact.md
	systemCompact string
	//go:embed compact.md
	compactRequest string
	//go:embed last-call.md
	lastCallNote string
)

// SystemPrompt returns mm's system prompt: the compact one for a small
// context window, else the full one.
func SystemPrompt(compact bool) string {
	if compact {
		return systemCompact
	}
	return systemPrompt
}

// CompactRequest returns the request for a compaction summary, with
// {{plan}} (the session's plan, or nothing) and {{words}} (the length
// budget) to fill in. It starts with the words scripts match on.
func CompactRequest() string { return compactRequest }

// LastCallNote returns the note of a turn's last model call, with
// {{calls}} to fill in.
func LastCallNote() string { return lastCallNote }
