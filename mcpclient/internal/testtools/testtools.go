// Package testtools holds the tools of the MCP test server, for the tests of
// package mcpclient: the stdio test server (internal/testserver) serves them,
// and so does the tests' HTTP server, so that both transports are tested
// against the same tools.
package testtools

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// New returns a server with every test tool.
func New() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "testserver", Version: "1"}, nil)
	Register(s)
	return s
}

type echoIn struct {
	Text string `json:"text" jsonschema:"the text to echo"`
}

type addIn struct {
	A float64 `json:"a"`
	B float64 `json:"b"`
}

type slowIn struct {
	Seconds float64 `json:"seconds"`
	// Started is a file written once the tool runs, Cancelled one written
	// when its context is cancelled.
	Started   string `json:"started,omitempty"`
	Cancelled string `json:"cancelled,omitempty"`
}

type envIn struct {
	Name string `json:"name"`
}

type none struct{}

// PNGBytes is the image the image tool returns: a PNG header, as an image
// tool would return.
var PNGBytes = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89")

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// Register adds the test tools to s.
func Register(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{
		Name:        "echo",
		Description: "echoes its text",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, Title: "Echo"},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
		return text(in.Text), nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "adds a and b"},
		func(_ context.Context, _ *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, any, error) {
			return text(fmt.Sprint(in.A + in.B)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "image", Description: "returns an image"},
		func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "a pixel"},
				&mcp.ImageContent{MIMEType: "image/png", Data: PNGBytes},
			}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "resource", Description: "returns embedded resources"},
		func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///a.txt", MIMEType: "text/plain", Text: "hello"}},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///b.bin", MIMEType: "application/octet-stream", Blob: []byte{0, 1, 2}}},
			}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "always fails"},
		func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, any, error) {
			return nil, nil, errors.New("it failed on purpose")
		})
	mcp.AddTool(s, &mcp.Tool{Name: "slow", Description: "sleeps"},
		func(ctx context.Context, _ *mcp.CallToolRequest, in slowIn) (*mcp.CallToolResult, any, error) {
			if in.Started != "" {
				_ = os.WriteFile(in.Started, []byte("started"), 0o644)
			}
			select {
			case <-time.After(time.Duration(in.Seconds * float64(time.Second))):
				return text("slept"), nil, nil
			case <-ctx.Done():
				if in.Cancelled != "" {
					_ = os.WriteFile(in.Cancelled, []byte(context.Cause(ctx).Error()), 0o644)
				}
				return nil, nil, ctx.Err()
			}
		})
	mcp.AddTool(s, &mcp.Tool{Name: "pid", Description: "returns the server's pid"},
		func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, any, error) {
			return text(fmt.Sprint(os.Getpid())), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "spawn", Description: "starts a background child and returns its pid"},
		func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, any, error) {
			// The child's standard streams are /dev/null, as a daemon's
			// would be: it holds none of the server's pipes.
			exe, err := os.Executable()
			if err != nil {
				return nil, nil, err
			}
			cmd := exec.Command(exe, "sleep")
			if err := cmd.Start(); err != nil {
				return nil, nil, err
			}
			go func() { _ = cmd.Wait() }()
			return text(fmt.Sprint(cmd.Process.Pid)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "env", Description: "returns an environment variable"},
		func(_ context.Context, _ *mcp.CallToolRequest, in envIn) (*mcp.CallToolResult, any, error) {
			return text(os.Getenv(in.Name)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "cwd", Description: "returns the working directory"},
		func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, any, error) {
			wd, err := os.Getwd()
			return text(wd), nil, err
		})
	mcp.AddTool(s, &mcp.Tool{Name: "grow", Description: "adds the tool extra"},
		func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, any, error) {
			mcp.AddTool(s, &mcp.Tool{Name: "extra", Description: "added by grow"},
				func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, any, error) {
					return text("extra"), nil, nil
				})
			return text("grown"), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "header", Description: "returns a request header (HTTP only)"},
		func(_ context.Context, req *mcp.CallToolRequest, in envIn) (*mcp.CallToolResult, any, error) {
			var h http.Header
			if req.Extra != nil {
				h = req.Extra.Header
			}
			return text(h.Get(in.Name)), nil, nil
		})
	// Names the client must reduce: a dot, and more than 64 characters.
	s.AddTool(&mcp.Tool{Name: "odd.name", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return text("odd"), nil })
	s.AddTool(&mcp.Tool{Name: "long_" + strings.Repeat("x", 70), InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return text("long"), nil })
}
