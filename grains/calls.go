package grains

import (
	"encoding/json"
	"fmt"

	"github.com/coder/acp-go-sdk"

	"github.com/mm-agent/mm/grains/grainspb"
)

// A client's request crosses nodes typed: the edge decoded its params once
// (protocol's method table), and encodeParams puts what it made of them in
// the Call; the grain's node takes them back out with decodeParams and
// checks them again (protocol.Caller.Serve), as it checks anything that
// comes from another node. No JSON of a prompt is read on the session's
// node.

// cancelRequest is a $/cancel_request of the prompt request id.
type cancelRequest struct{ id json.RawMessage }

// encodeParams puts the decoded params p of a request of method into c.
func encodeParams(c *grainspb.Call, method string, p any) error {
	switch v := p.(type) {
	case acp.PromptRequest:
		c.Params = &grainspb.Call_Prompt{Prompt: encodePrompt(v)}
	case acp.NewSessionRequest:
		o, err := encodeOpen("", v.Cwd, v.AdditionalDirectories, v.McpServers)
		c.Params = &grainspb.Call_Open{Open: o}
		return err
	case acp.LoadSessionRequest:
		o, err := encodeOpen(string(v.SessionId), v.Cwd, v.AdditionalDirectories, v.McpServers)
		c.Params = &grainspb.Call_Open{Open: o}
		return err
	case acp.ResumeSessionRequest:
		o, err := encodeOpen(string(v.SessionId), v.Cwd, v.AdditionalDirectories, v.McpServers)
		c.Params = &grainspb.Call_Open{Open: o}
		return err
	case acp.UnstableForkSessionRequest:
		o, err := encodeOpen(string(v.SessionId), v.Cwd, v.AdditionalDirectories, v.McpServers)
		c.Params = &grainspb.Call_Open{Open: o}
		return err
	case acp.SetSessionModeRequest:
		c.Params = &grainspb.Call_SetMode{SetMode: &grainspb.SetMode{ModeId: string(v.ModeId)}}
	case acp.SetSessionConfigOptionRequest:
		switch {
		case v.ValueId != nil:
			c.Params = &grainspb.Call_SetConfigOption{SetConfigOption: &grainspb.SetConfigOption{
				ConfigId: string(v.ValueId.ConfigId), Value: &grainspb.SetConfigOption_ValueId{ValueId: string(v.ValueId.Value)}}}
		case v.Boolean != nil:
			c.Params = &grainspb.Call_SetConfigOption{SetConfigOption: &grainspb.SetConfigOption{
				ConfigId: string(v.Boolean.ConfigId), Value: &grainspb.SetConfigOption_Boolean{Boolean: v.Boolean.Value}}}
		default:
			return fmt.Errorf("%s: a config option with no value", method)
		}
	case cancelRequest:
		c.Params = &grainspb.Call_RequestId{RequestId: v.id}
	case acp.CloseSessionRequest, acp.UnstableDeleteSessionRequest, acp.CancelNotification:
		// The session's id is all they say.
	default:
		return fmt.Errorf("%s: mm's nodes do not carry params of type %T", method, p)
	}
	return nil
}

// decodeParams is the request c carries, as the SDK's type of its method.
func decodeParams(c *grainspb.Call) (any, error) {
	sid := acp.SessionId(c.SessionId)
	o := c.GetOpen()
	if o == nil {
		o = &grainspb.Open{}
	}
	switch c.Method {
	case acp.AgentMethodSessionPrompt:
		return decodePrompt(sid, c.GetPrompt())
	case acp.AgentMethodSessionNew:
		p := acp.NewSessionRequest{Cwd: o.Cwd, AdditionalDirectories: o.AdditionalDirectories}
		return p, servers(o, &p.McpServers)
	case acp.AgentMethodSessionLoad:
		p := acp.LoadSessionRequest{SessionId: sid, Cwd: o.Cwd, AdditionalDirectories: o.AdditionalDirectories}
		return p, servers(o, &p.McpServers)
	case acp.AgentMethodSessionResume:
		p := resumeOf(sid, o)
		return p, servers(o, &p.McpServers)
	case acp.AgentMethodSessionFork:
		p := acp.UnstableForkSessionRequest{SessionId: acp.SessionId(o.SessionId), Cwd: o.Cwd, AdditionalDirectories: o.AdditionalDirectories}
		return p, servers(o, &p.McpServers)
	case acp.AgentMethodSessionClose:
		return acp.CloseSessionRequest{SessionId: sid}, nil
	case acp.AgentMethodSessionDelete:
		return acp.UnstableDeleteSessionRequest{SessionId: sid}, nil
	case acp.AgentMethodSessionSetMode:
		return acp.SetSessionModeRequest{SessionId: sid, ModeId: acp.SessionModeId(c.GetSetMode().GetModeId())}, nil
	case acp.AgentMethodSessionSetConfigOption:
		o := c.GetSetConfigOption()
		switch v := o.GetValue().(type) {
		case *grainspb.SetConfigOption_ValueId:
			return acp.SetSessionConfigOptionRequest{ValueId: &acp.SetSessionConfigOptionValueId{
				SessionId: sid, ConfigId: acp.SessionConfigId(o.ConfigId), Value: acp.SessionConfigValueId(v.ValueId)}}, nil
		case *grainspb.SetConfigOption_Boolean:
			return acp.SetSessionConfigOptionRequest{Boolean: &acp.SetSessionConfigOptionBoolean{
				SessionId: sid, ConfigId: acp.SessionConfigId(o.ConfigId), Type: "boolean", Value: v.Boolean}}, nil
		}
		return nil, fmt.Errorf("%s: a config option with no value", c.Method)
	}
	return nil, fmt.Errorf("mm's nodes carry no method %q", c.Method)
}

// resumeOf is a session/resume of session sid with what o opened it with.
func resumeOf(sid acp.SessionId, o *grainspb.Open) acp.ResumeSessionRequest {
	return acp.ResumeSessionRequest{SessionId: sid, Cwd: o.GetCwd(), AdditionalDirectories: o.GetAdditionalDirectories()}
}

// reopenOf is the session/resume a Call carries for its session, when it
// has one: what opened the session on the client's node.
func reopenOf(c *grainspb.Call) (acp.ResumeSessionRequest, bool) {
	o := c.GetReopen()
	if o == nil {
		return acp.ResumeSessionRequest{}, false
	}
	p := resumeOf(acp.SessionId(c.SessionId), o)
	if servers(o, &p.McpServers) != nil {
		return p, false
	}
	if p.McpServers == nil {
		p.McpServers = []acp.McpServer{}
	}
	return p, true
}

func encodeOpen[S any](sid, cwd string, dirs []string, mcp []S) (*grainspb.Open, error) {
	o := &grainspb.Open{SessionId: sid, Cwd: cwd, AdditionalDirectories: dirs}
	if mcp != nil {
		b, err := json.Marshal(mcp)
		if err != nil {
			return nil, fmt.Errorf("the MCP servers: %w", err)
		}
		o.McpServers = b
	}
	return o, nil
}

// servers reads o's MCP servers into dst; none (nil) when o has none.
func servers[S any](o *grainspb.Open, dst *[]S) error {
	if len(o.McpServers) == 0 {
		return nil
	}
	if err := json.Unmarshal(o.McpServers, dst); err != nil {
		return fmt.Errorf("the MCP servers: %w", err)
	}
	return nil
}

func encodePrompt(p acp.PromptRequest) *grainspb.Prompt {
	out := &grainspb.Prompt{MessageId: p.MessageId, Blocks: make([]*grainspb.Content, 0, len(p.Prompt))}
	for _, b := range p.Prompt {
		var c grainspb.Content
		switch {
		case b.Text != nil:
			c.Block = &grainspb.Content_Text{Text: &grainspb.Text{Text: b.Text.Text}}
		case b.Image != nil:
			c.Block = &grainspb.Content_Image{Image: &grainspb.Image{Data: b.Image.Data, MimeType: b.Image.MimeType, Uri: b.Image.Uri}}
		case b.Audio != nil:
			c.Block = &grainspb.Content_Audio{Audio: &grainspb.Audio{Data: b.Audio.Data, MimeType: b.Audio.MimeType}}
		case b.ResourceLink != nil:
			l := b.ResourceLink
			pl := &grainspb.ResourceLink{Uri: l.Uri, Name: l.Name, MimeType: l.MimeType, Title: l.Title, Description: l.Description}
			if l.Size != nil {
				pl.Size = new(int64(*l.Size))
			}
			c.Block = &grainspb.Content_ResourceLink{ResourceLink: pl}
		case b.Resource != nil:
			var r grainspb.Resource
			switch res := b.Resource.Resource; {
			case res.TextResourceContents != nil:
				r.Uri, r.MimeType = res.TextResourceContents.Uri, res.TextResourceContents.MimeType
				r.Contents = &grainspb.Resource_Text{Text: res.TextResourceContents.Text}
			case res.BlobResourceContents != nil:
				r.Uri, r.MimeType = res.BlobResourceContents.Uri, res.BlobResourceContents.MimeType
				r.Contents = &grainspb.Resource_Blob{Blob: res.BlobResourceContents.Blob}
			}
			c.Block = &grainspb.Content_Resource{Resource: &r}
		}
		out.Blocks = append(out.Blocks, &c)
	}
	return out
}

func decodePrompt(sid acp.SessionId, p *grainspb.Prompt) (acp.PromptRequest, error) {
	out := acp.PromptRequest{SessionId: sid, MessageId: p.MessageId, Prompt: make([]acp.ContentBlock, 0, len(p.GetBlocks()))}
	for i, c := range p.GetBlocks() {
		var b acp.ContentBlock
		switch v := c.GetBlock().(type) {
		case *grainspb.Content_Text:
			b.Text = &acp.ContentBlockText{Type: "text", Text: v.Text.GetText()}
		case *grainspb.Content_Image:
			b.Image = &acp.ContentBlockImage{Type: "image", Data: v.Image.GetData(), MimeType: v.Image.GetMimeType(), Uri: v.Image.Uri}
		case *grainspb.Content_Audio:
			b.Audio = &acp.ContentBlockAudio{Type: "audio", Data: v.Audio.GetData(), MimeType: v.Audio.GetMimeType()}
		case *grainspb.Content_ResourceLink:
			l := v.ResourceLink
			b.ResourceLink = &acp.ContentBlockResourceLink{Type: "resource_link", Uri: l.GetUri(), Name: l.GetName(),
				MimeType: l.MimeType, Title: l.Title, Description: l.Description}
			if l.Size != nil {
				b.ResourceLink.Size = new(int(*l.Size))
			}
		case *grainspb.Content_Resource:
			r := v.Resource
			b.Resource = &acp.ContentBlockResource{Type: "resource"}
			switch c := r.GetContents().(type) {
			case *grainspb.Resource_Text:
				b.Resource.Resource.TextResourceContents = &acp.TextResourceContents{Uri: r.GetUri(), MimeType: r.MimeType, Text: c.Text}
			case *grainspb.Resource_Blob:
				b.Resource.Resource.BlobResourceContents = &acp.BlobResourceContents{Uri: r.GetUri(), MimeType: r.MimeType, Blob: c.Blob}
			default:
				return out, fmt.Errorf("block %d: a resource with no contents", i)
			}
		default:
			return out, fmt.Errorf("block %d: no content", i)
		}
		out.Prompt = append(out.Prompt, b)
	}
	return out, nil
}
