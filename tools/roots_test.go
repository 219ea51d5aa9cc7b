package tools

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mm-agent/mm/sandbox"
)

// TestRootsConfineFileTools: with roots (mm serve's serve.roots), mm's own
// file tools open nothing outside them, links followed (issue 28:
// read_file of an absolute path outside the root returned the file): the
// refusal is a result the model reads; inside, they work; without roots,
// nothing is refused.
func TestRootsConfineFileTools(t *testing.T) {
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	mustWrite(t, filepath.Join(root, "in.txt"), "inside\n")
	mustWrite(t, filepath.Join(outside, "secret.txt"), "secret\n")
	if err := os.Symlink(outside, filepath.Join(root, "door")); err != nil {
		t.Fatal(err)
	}
	env := Env{Cwd: root, Roots: []string{root}}
	refused := []struct{ tool, args string }{
		{"read_file", fmt.Sprintf(`{"path":%q}`, filepath.Join(outside, "secret.txt"))},
		{"read_file", `{"path":"door/secret.txt"}`},
		{"read_file", `{"path":"../outside/secret.txt"}`},
		{"write_file", `{"path":"door/new.txt","content":"x"}`},
		{"write_file", fmt.Sprintf(`{"path":%q,"content":"x"}`, filepath.Join(outside, "made.txt"))},
		{"edit_file", `{"path":"door/secret.txt","old_text":"secret","new_text":"mine"}`},
		{"fetch_content", fmt.Sprintf(`{"url":"http://127.0.0.1:1/","output":%q}`, filepath.Join(outside, "page.md"))},
	}
	for _, r := range refused {
		c, err := Prepare(env, r.tool, r.args)
		if err == nil || !strings.Contains(err.Error(), "outside the folders this server serves") {
			t.Errorf("%s %s prepared: %v", r.tool, r.args, err)
		}
		if c != nil && c.Tool != nil {
			if res := Run(context.Background(), env, c); !res.Failed || !strings.Contains(res.Output, "outside the folders") {
				t.Errorf("%s %s ran: %+v", r.tool, r.args, res)
			}
		}
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret.txt")); string(b) != "secret\n" {
		t.Errorf("the file outside was changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(outside, "made.txt")); err == nil {
		t.Error("a file was made outside")
	}
	if res := runTool(t, env, "read_file", `{"path":"in.txt"}`); res.Failed || res.Output != "     1\tinside\n" {
		t.Errorf("inside: %+v", res)
	}
	if res := runTool(t, env, "write_file", `{"path":"sub/new.txt","content":"made\n"}`); res.Failed {
		t.Errorf("a new file inside: %+v", res)
	}
	if res := runTool(t, Env{Cwd: root}, "read_file", `{"path":"door/secret.txt"}`); res.Failed || res.Output != "     1\tsecret\n" {
		t.Errorf("without roots: %+v", res)
	}
}

// TestOwnOutputsReadable: the file a cut output names is read by read_file
// whatever confines the file tools — serve.roots, a sandbox that hides
// every session's outputs but lets the session read its own — and is not
// written.
func TestOwnOutputsReadable(t *testing.T) {
	base := t.TempDir()
	root, outputs := filepath.Join(base, "root"), filepath.Join(base, "outputs")
	mine := filepath.Join(outputs, "mine")
	mustWrite(t, filepath.Join(mine, "call_1.out"), "whole\n")
	mustWrite(t, filepath.Join(outputs, "other", "call_2.out"), "theirs\n")
	mustMkdir(t, root)
	env := Env{Cwd: root, Roots: []string{root}, Output: Output{Dir: mine},
		Sandbox: sandbox.Policy{Mode: sandbox.WorkspaceWrite, Writable: []string{root}, Hidden: []string{outputs}, Readable: []string{mine}}}
	if res := runTool(t, env, "read_file", fmt.Sprintf(`{"path":%q}`, filepath.Join(mine, "call_1.out"))); res.Failed || res.Output != "     1\twhole\n" {
		t.Errorf("the session's own output: %+v", res)
	}
	if _, err := Prepare(env, "read_file", fmt.Sprintf(`{"path":%q}`, filepath.Join(outputs, "other", "call_2.out"))); err == nil {
		t.Error("another session's output was read")
	}
	if _, err := Prepare(env, "write_file", fmt.Sprintf(`{"path":%q,"content":"x"}`, filepath.Join(mine, "call_1.out"))); err == nil {
		t.Error("the session's output folder was written")
	}
	env.Roots = nil // the sandbox alone
	if res := runTool(t, env, "read_file", fmt.Sprintf(`{"path":%q}`, filepath.Join(mine, "call_1.out"))); res.Failed {
		t.Errorf("the session's own output, sandbox only: %+v", res)
	}
}
