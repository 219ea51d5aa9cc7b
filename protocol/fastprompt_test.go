package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
)

// FuzzFastPrompt: the fastjson path takes a prompt off the wire exactly as
// the general path does — same id, session, blocks and error reply — or
// leaves the line to it.
func FuzzFastPrompt(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":42,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"ping \"q\" \u00e9 \n"}]}}`,
		`{"jsonrpc":"2.0","id":"a\"b","method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"resource_link","uri":"file:///x","name":"x"},{"type":"text","text":"@x"}]}}`,
		`{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"s1","prompt":[]}}`,
		`{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"s1"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":7,"prompt":[]}}`,
		`{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"image","data":"AA==","mimeType":"image/png"}]}}`,
		`{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":null}]}}`,
		`{"jsonrpc":"2.0","id":null,"method":"session/prompt","params":{"sessionId":"s1","prompt":[]}}`,
		`{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"x"}]`,
		`{"jsonrpc":"2.0","id":1,"method":"session/load","params":{"sessionId":"s1","cwd":"session/prompt"}}`,
		`{"jsonrpc":"2.0","id":1.5e3,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"x","annotations":{"priority":1}}]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		run := func(noFast bool) (jobs []promptJob, wire string, passed string) {
			var out bytes.Buffer
			w := &wireIn{seq: map[string]uint64{}, out: newWireOut(&out), noFast: noFast,
				prompt: func(j promptJob) { jobs = append(jobs, j) }}
			passed = string(w.filter(append(line, '\n')))
			return jobs, out.String(), passed
		}
		fastJobs, fastWire, fastPassed := run(false)
		slowJobs, slowWire, slowPassed := run(true)
		if fmt.Sprint(fastWire, fastPassed) != fmt.Sprint(slowWire, slowPassed) || len(fastJobs) != len(slowJobs) {
			t.Fatalf("paths differ on %q:\nfast %q %q %d jobs\nslow %q %q %d jobs", line, fastWire, fastPassed, len(fastJobs), slowWire, slowPassed, len(slowJobs))
		}
		for i := range fastJobs {
			a, b := fastJobs[i], slowJobs[i]
			var ida, idb any
			_ = json.Unmarshal(a.id, &ida)
			_ = json.Unmarshal(b.id, &idb)
			ba, _ := json.Marshal(a.blocks)
			bb, _ := json.Marshal(b.blocks)
			if fmt.Sprint(ida) != fmt.Sprint(idb) || a.sessionID != b.sessionID || a.seq != b.seq || string(ba) != string(bb) || (a.err == nil) != (b.err == nil) {
				t.Fatalf("jobs differ on %q:\nfast %s %s %s %d %v\nslow %s %s %s %d %v", line, a.id, a.sessionID, ba, a.seq, a.err, b.id, b.sessionID, bb, b.seq, b.err)
			}
		}
	})
}

// TestFastPromptTakesTheCommonShape: the prompts editors send (text and
// resource_link blocks) take the fastjson path; the fuzz test above would
// pass if that path were never taken.
func TestFastPromptTakesTheCommonShape(t *testing.T) {
	w := &wireIn{seq: map[string]uint64{}, out: newWireOut(&bytes.Buffer{}), prompt: func(promptJob) {}}
	for _, line := range []string{
		`{"jsonrpc":"2.0","id":42,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"text","text":"ping"}]}}`,
		`{"jsonrpc":"2.0","id":"x","method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"resource_link","uri":"file:///a","name":"a"},{"type":"text","text":"look"}],"_meta":{"k":1}}}`,
	} {
		if !w.fastPrompt([]byte(line)) {
			t.Errorf("not taken by the fast path: %s", line)
		}
	}
	if w.fastPrompt([]byte(`{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"s1","prompt":[{"type":"image","data":"AA==","mimeType":"image/png"}]}}`)) {
		t.Error("an image block took the fast path")
	}
}
