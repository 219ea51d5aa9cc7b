package stress

import (
	"encoding/json"
	"testing"

	"github.com/mm-agent/mm/jsonrpc"
)

// TestPromptBytes: the prompt the harness appends is the one the SDK's
// types marshal to, in the request jsonrpc encodes.
func TestPromptBytes(t *testing.T) {
	for _, text := range []string{"ping s0 t0", `quote " back \ <tag> & é` + "\n\t"} {
		want, err := json.Marshal(textPrompt("20260101-000000-00000000", text))
		if err != nil {
			t.Fatal(err)
		}
		p := promptBytes("20260101-000000-00000000", text)
		if string(p) != string(want) {
			t.Errorf("promptBytes(%q)\n got %s\nwant %s", text, p, want)
		}
		wantReq, err := jsonrpc.EncodeRequest(jsonrpc.IntID(42), "session/prompt", json.RawMessage(want))
		if err != nil {
			t.Fatal(err)
		}
		if got := jsonrpc.AppendRequest(nil, jsonrpc.IntID(42), "session/prompt", p, true); string(got) != string(wantReq) {
			t.Errorf("AppendRequest\n got %s\nwant %s", got, wantReq)
		}
	}
}
