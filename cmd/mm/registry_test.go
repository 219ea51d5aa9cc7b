package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The ACP registry entry (acp_registry/) is checked against the registry's
// own rules (github.com/agentclientprotocol/registry: agent.schema.json and
// the checks of its build) and against this repository: the binary's
// version, the archives scripts/release.sh makes, the licence.

const (
	registryDir = "../../acp_registry"
	releaseSh   = "../../scripts/release.sh"
	repoURL     = "https://github.com/mm-agent/mm"
)

// registryPlatforms are the registry's platform targets; mm ships all six.
var registryPlatforms = []string{"darwin-aarch64", "darwin-x86_64", "linux-aarch64", "linux-x86_64", "windows-aarch64", "windows-x86_64"}

// registryEntry mirrors agent.schema.json; decoding rejects unknown keys, as
// the schema does ("additionalProperties": false).
type registryEntry struct {
	ID           string   `json:"id"`
	Name         string   `json:"name"`
	Version      string   `json:"version"`
	Description  string   `json:"description"`
	Repository   string   `json:"repository"`
	Website      string   `json:"website"`
	Authors      []string `json:"authors"`
	License      string   `json:"license"`
	LicenseURL   string   `json:"license_url"`
	Icon         string   `json:"icon"`
	Distribution struct {
		Binary map[string]struct {
			Archive string            `json:"archive"`
			SHA256  string            `json:"sha256"`
			Cmd     string            `json:"cmd"`
			Args    []string          `json:"args"`
			Env     map[string]string `json:"env"`
		} `json:"binary"`
		Npx json.RawMessage `json:"npx"`
		Uvx json.RawMessage `json:"uvx"`
	} `json:"distribution"`
}

func readRegistryEntry(t *testing.T) registryEntry {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(registryDir, "agent.json"))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var e registryEntry
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("acp_registry/agent.json: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("acp_registry/agent.json: data after the object")
	}
	return e
}

// binaryVersion is what the mm built by TestMain prints for --version.
func binaryVersion(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(mmBin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// releaseNames asks scripts/release.sh which archive and command each
// registry platform gets for version (a git tag, v1.2.3).
func releaseNames(t *testing.T, version string) map[string][2]string {
	t.Helper()
	cmd := exec.Command("bash", releaseSh, "--names", version)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TARGETS=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("release.sh --names %s: %v", version, err)
	}
	names := map[string][2]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("release.sh --names: line %q is not \"platform archive cmd\"", line)
		}
		names[f[0]] = [2]string{f[1], f[2]}
	}
	return names
}

func TestRegistryManifest(t *testing.T) {
	e := readRegistryEntry(t)
	if e.ID != "mm" {
		t.Errorf("id %q, want mm (the folder's name in the registry)", e.ID)
	}
	if e.Name == "" || e.Description == "" || len(e.Authors) == 0 || e.Icon == "" {
		t.Errorf("name %q, description %q, authors %q, icon %q: none may be empty", e.Name, e.Description, e.Authors, e.Icon)
	}
	if e.Repository != repoURL {
		t.Errorf("repository %q, want %q", e.Repository, repoURL)
	}
	// The registry wants x.y.z; the binary and the git tag say vx.y.z.
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(e.Version) {
		t.Errorf("version %q is not x.y.z, as the registry requires", e.Version)
	}
	if got := binaryVersion(t); got != "v"+e.Version {
		t.Errorf("mm --version prints %q but acp_registry/agent.json has version %q: bump both (protocol.Version and the manifest's version and URLs)", got, e.Version)
	}
	if e.License != "MIT" {
		t.Errorf("license %q, want MIT", e.License)
	}
	lic, err := os.ReadFile("../../LICENSE")
	if err != nil || !strings.HasPrefix(string(lic), "MIT License") {
		t.Errorf("LICENSE does not start with \"MIT License\" (%v)", err)
	}
	if e.Distribution.Npx != nil || e.Distribution.Uvx != nil {
		t.Errorf("only the binary distribution is expected")
	}
}

func TestRegistryBinaryTargets(t *testing.T) {
	e := readRegistryEntry(t)
	tag := "v" + e.Version
	names := releaseNames(t, tag)
	var got, made []string
	for p := range e.Distribution.Binary {
		got = append(got, p)
	}
	for p := range names {
		made = append(made, p)
	}
	sort.Strings(got)
	sort.Strings(made)
	if !slices.Equal(got, registryPlatforms) {
		t.Errorf("manifest platforms %v, want %v", got, registryPlatforms)
	}
	if !slices.Equal(made, registryPlatforms) {
		t.Errorf("release.sh makes archives for %v, want %v", made, registryPlatforms)
	}
	for _, p := range registryPlatforms {
		b, ok := e.Distribution.Binary[p]
		if !ok {
			continue
		}
		want := names[p]
		if url := repoURL + "/releases/download/" + tag + "/" + want[0]; b.Archive != url {
			t.Errorf("%s: archive %q, want %q (what scripts/release.sh %s uploads)", p, b.Archive, url, tag)
		}
		if b.Cmd != want[1] {
			t.Errorf("%s: cmd %q, want %q (the archive's binary)", p, b.Cmd, want[1])
		}
		if !slices.Equal(b.Args, []string{"-acp"}) {
			t.Errorf("%s: args %q, want [\"-acp\"]", p, b.Args)
		}
		if b.SHA256 != "" || len(b.Env) != 0 {
			t.Errorf("%s: unexpected sha256 or env", p)
		}
	}
}

// TestRegistryIcon applies the registry's icon rules: a 16x16 SVG without
// comments, monochrome through currentColor (fill and stroke may only be
// currentColor, none or inherit, in attributes, style attributes and
// <style> sheets alike).
func TestRegistryIcon(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(registryDir, "icon.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte("<!--")) {
		t.Errorf("icon.svg has a comment (the registry rejects them)")
	}
	allowed := map[string]bool{"currentcolor": true, "none": true, "inherit": true}
	usesCurrent := false
	check := func(where, prop, value string) {
		v := strings.ToLower(strings.TrimSpace(value))
		switch {
		case v == "currentcolor":
			usesCurrent = true
		case !allowed[v]:
			t.Errorf("icon.svg: %s %s=%q: only currentColor, none or inherit", where, prop, value)
		}
	}
	cssProp := regexp.MustCompile(`(?i)\b(fill|stroke)\s*:\s*([^;}\s]+)`)
	dec := xml.NewDecoder(bytes.NewReader(data))
	root := true
	var inStyle bool
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("icon.svg is not XML: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			attr := map[string]string{}
			for _, a := range el.Attr {
				attr[a.Name.Local] = a.Value
			}
			if root {
				root = false
				if el.Name.Local != "svg" {
					t.Fatalf("icon.svg's root is <%s>, want <svg>", el.Name.Local)
				}
				if attr["width"] != "16" || attr["height"] != "16" {
					t.Errorf("icon.svg is %sx%s, want 16x16", attr["width"], attr["height"])
				}
				if vb, ok := attr["viewBox"]; ok && strings.Join(strings.Fields(vb), " ") != "0 0 16 16" {
					t.Errorf("icon.svg viewBox %q, want \"0 0 16 16\"", vb)
				}
			}
			for _, prop := range []string{"fill", "stroke"} {
				if v, ok := attr[prop]; ok {
					check("<"+el.Name.Local+">", prop, v)
				}
			}
			for _, m := range cssProp.FindAllStringSubmatch(attr["style"], -1) {
				check("<"+el.Name.Local+" style>", m[1], m[2])
			}
			inStyle = el.Name.Local == "style"
		case xml.CharData:
			if inStyle {
				for _, m := range cssProp.FindAllStringSubmatch(string(el), -1) {
					check("<style>", m[1], m[2])
				}
			}
		case xml.EndElement:
			inStyle = false
		}
	}
	if !usesCurrent {
		t.Errorf("icon.svg never uses currentColor")
	}
}
