package protocol_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/acptest"
	"github.com/mm-agent/mm/configs"
)

const contentScript = `
rules:
  - match: "^look"
    steps: [{text: "seen"}]
`

// pixel is a 1×1 PNG, base64.
const pixel = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

func textResource(uri, text string) acp.ContentBlock {
	return acp.ResourceBlock(acp.EmbeddedResourceResource{TextResourceContents: &acp.TextResourceContents{Uri: uri, Text: text, MimeType: acp.Ptr("text/plain")}})
}

func blobResource(uri, mime, blob string) acp.ContentBlock {
	return acp.ResourceBlock(acp.EmbeddedResourceResource{BlobResourceContents: &acp.BlobResourceContents{Uri: uri, Blob: blob, MimeType: acp.Ptr(mime)}})
}

// lastUserContent is the last message the model server received, as JSON.
func (e *env) lastUserContent() string {
	e.t.Helper()
	msgs := e.requestMessages()
	b, _ := json.Marshal(msgs[len(msgs)-1]["content"])
	return string(b)
}

func (e *env) prompt(sid acp.SessionId, blocks ...acp.ContentBlock) {
	e.t.Helper()
	if _, err := e.conn.Prompt(e.ctx, acp.PromptRequest{SessionId: sid, Prompt: blocks}); err != nil {
		e.t.Fatal(err)
	}
}

// TestEmbeddedResources: a pasted file is inlined between lines naming it;
// a long one is cut at a character boundary with a note; binary data is
// described; an @mention inside a pasted file attaches nothing.
func TestEmbeddedResources(t *testing.T) {
	e := newEnvScript(t, contentScript, func(c *configs.Config) { c.Prompt.MaxResourceBytes = 1024 })
	if err := writeFile(e.cwd+"/main.go", "package main"); err != nil {
		t.Fatal(err)
	}
	sid := e.newSession()
	e.prompt(sid, acp.TextBlock("look at this"), textResource("file:///src/a.go", "package a\n// see @main.go\n"))
	msgs := e.requestMessages()
	want := "look at this\n[file: /src/a.go]\npackage a\n// see @main.go\n[end of file: /src/a.go]"
	if got := msgs[len(msgs)-1]["content"]; got != want {
		t.Errorf("user message\n got %q\nwant %q", got, want)
	}

	// 1,023 ASCII bytes, then "é" across the 1,024-byte limit.
	long := strings.Repeat("x", 1023) + "é" + strings.Repeat("y", 2000)
	e.prompt(sid, acp.TextBlock("look again"), textResource("file:///src/long.txt", long))
	msgs = e.requestMessages()
	got := msgs[len(msgs)-1]["content"].(string)
	want = "look again\n[file: /src/long.txt]\n" + strings.Repeat("x", 1023) +
		"\n[cut: only the first 1023 bytes of 3.0 KiB are shown (prompt.maxResourceBytes); read_file can read the rest]\n[end of file: /src/long.txt]"
	if got != want {
		t.Errorf("long resource\n got %q\nwant %q", got, want)
	}

	e.prompt(sid, acp.TextBlock("look at the archive"), blobResource("file:///src/a.zip", "application/zip", strings.Repeat("AAAA", 300)))
	msgs = e.requestMessages()
	if got, want := msgs[len(msgs)-1]["content"], "look at the archive\n[attached file: /src/a.zip (application/zip, 900 bytes): binary, not shown]"; got != want {
		t.Errorf("binary resource\n got %q\nwant %q", got, want)
	}
	if text := acptest.Text(e.conn.Client.Updates(sid)); text != "seenseenseen" {
		t.Errorf("answers %q", text)
	}
}

// TestImages: a vision model gets the image as an image part and the
// capability is advertised; another model is told it was left out.
func TestImages(t *testing.T) {
	t.Run("vision", func(t *testing.T) {
		e := newEnvScript(t, contentScript, func(c *configs.Config) { c.Model.Vision = true })
		if caps := e.init.AgentCapabilities; !caps.PromptCapabilities.Image || !caps.PromptCapabilities.EmbeddedContext {
			t.Errorf("promptCapabilities %+v", caps.PromptCapabilities)
		}
		sid := e.newSession()
		e.prompt(sid, acp.TextBlock("look at"), acp.ImageBlock(pixel, "image/png"), blobResource("file:///shot.png", "image/png", pixel))
		got := e.lastUserContent()
		if !strings.Contains(got, `"text":"look at"`) || strings.Count(got, `"url":"data:image/png;base64,`+pixel+`"`) != 2 {
			t.Errorf("the server got %s", got)
		}
	})
	t.Run("no vision", func(t *testing.T) {
		e := newEnvScript(t, contentScript, nil)
		if caps := e.init.AgentCapabilities; caps.PromptCapabilities.Image || !caps.PromptCapabilities.EmbeddedContext {
			t.Errorf("promptCapabilities %+v", caps.PromptCapabilities)
		}
		sid := e.newSession()
		e.prompt(sid, acp.TextBlock("look at"), acp.ImageBlock(pixel, "image/png"))
		if got, want := e.lastUserContent(), `"look at\n[an image (image/png) was attached, but this model does not take images (model.vision is false): it was left out]"`; got != want {
			t.Errorf("the server got %s, want %s", got, want)
		}
	})
}

// TestContentPersistedAndReplayed: a pasted file and an image are in the
// session file, replayed by session/load, and sent again to the model.
func TestContentPersistedAndReplayed(t *testing.T) {
	e := newSessEnv(t, contentScript, func(c *configs.Config) { c.Model.Vision = true })
	first := e.agent()
	sid := e.newSession(first)
	if _, err := first.Prompt(e.ctx, acp.PromptRequest{SessionId: sid, Prompt: []acp.ContentBlock{
		acp.TextBlock("look at"), textResource("file:///src/a.go", "package a\n"), acp.ImageBlock(pixel, "image/png"),
	}}); err != nil {
		t.Fatal(err)
	}
	f := e.file(sid)
	if u := f.History[1]; len(u.Images) != 1 || u.Images[0].Data != pixel || !strings.Contains(u.Content, "[file: /src/a.go]\npackage a\n") || f.Title != "look at" {
		t.Fatalf("stored user message %+v, title %q", u, f.Title)
	}

	second := e.agent()
	if _, err := second.LoadSession(e.ctx, acp.LoadSessionRequest{SessionId: sid, Cwd: e.cwd, McpServers: []acp.McpServer{}}); err != nil {
		t.Fatal(err)
	}
	ups := second.Client.Updates(sid)
	if len(ups) < 3 || ups[0].UserMessageChunk == nil || !strings.Contains(ups[0].UserMessageChunk.Content.Text.Text, "package a") ||
		ups[1].UserMessageChunk == nil || ups[1].UserMessageChunk.Content.Image == nil || ups[1].UserMessageChunk.Content.Image.Data != pixel {
		t.Fatalf("replay %+v", ups)
	}
	e.ask(second, sid, "look again")
	msgs := e.server.LastRequest()["messages"].([]any)
	if b, _ := json.Marshal(msgs[1]); !strings.Contains(string(b), "data:image/png;base64,"+pixel) {
		t.Errorf("the loaded session sent %s", b)
	}
}
