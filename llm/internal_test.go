package llm

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestServerErrIsOneBoundedLine(t *testing.T) {
	err := serverErr("HTTP 500: %s", strings.Repeat("é\n", 1000))
	msg := err.Error()
	if !errors.Is(err, ErrServer) || strings.Contains(msg, "\n") || len([]rune(msg)) > maxErrorLen || !strings.HasSuffix(msg, "…") {
		t.Errorf("%q (%d chars)", msg, len([]rune(msg)))
	}
}

func TestIsToolCallChunk(t *testing.T) {
	for chunk, want := range map[string]bool{
		`[{"id":"c1","type":"function","function":{"name":"bash","arguments":""}}]`: true,
		`[{"type":"","function":{"name":"","arguments":"{\"a\":"}}]`:                true,
		`[{"id": "c1"}]`:               false, // not langchaingo's encoding
		`[{"type":"x"}] and more text`: false,
		`Hello`:                        false,
	} {
		if got := isToolCallChunk([]byte(chunk)); got != want {
			t.Errorf("isToolCallChunk(%s) = %v, want %v", chunk, got, want)
		}
	}
}

func TestDeleteJSONKey(t *testing.T) {
	out, err := deleteJSONKey([]byte(`{"model":"m","options":{"temperature":0,"num_predict":5}}`), []string{"options", "temperature"})
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	json.Unmarshal(out, &doc)
	if opts := doc["options"].(map[string]any); len(opts) != 1 || opts["num_predict"] != float64(5) || doc["model"] != "m" {
		t.Errorf("got %s", out)
	}
	if out, _ := deleteJSONKey([]byte(`{"a":1}`), []string{"options", "temperature"}); string(out) != `{"a":1}` {
		t.Errorf("a missing path must leave the body alone, got %s", out)
	}
}

// TestStreamBodySplitLines reads streams a byte at a time, so that every
// line arrives in pieces.
func TestStreamBodySplitLines(t *testing.T) {
	for body, wantErr := range map[string]string{
		"data: {\"choices\":[]}\r\n\r\n: comment\nevent: x\ndata: [DONE]\n": "",
		"data: {\"choices\":[]}\n\ndata: {\"choices\":[":                    "malformed stream",
		"data: {\"error\":\"overloaded\"}\n":                                "model server: overloaded",
		"\n\n":                                                              "no events",
	} {
		c := &call{}
		b := &streamBody{ReadCloser: io.NopCloser(iotest.OneByteReader(strings.NewReader(body))), call: c, sse: true}
		_, err := io.ReadAll(b)
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("%q: %v", body, err)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr) || c.failure() != err):
			t.Errorf("%q: error %v (recorded %v), want %q", body, err, c.failure(), wantErr)
		}
	}
}
