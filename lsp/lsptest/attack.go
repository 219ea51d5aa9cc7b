package lsptest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"
)

// Attacks are the values of -attack: what a hostile server does once it
// is initialized.
//   - endless-header: "Content-Length: 10" and then bytes without a line
//     end, for ever;
//   - huge-body: a header announcing a body of 1 GiB, then the body, byte
//     after byte, for ever;
//   - header-flood: header lines, for ever, never the empty line;
//   - ask-flood: window/showMessageRequest requests, for ever, and it reads
//     nothing more, answers included;
//   - log-flood: window/logMessage notifications, for ever, while it goes
//     on answering requests;
//   - stderr-flood: lines on stderr, for ever, while it goes on answering;
//   - mute: it reads everything and answers nothing but shutdown.
var Attacks = []string{"endless-header", "huge-body", "header-flood", "ask-flood", "log-flood", "stderr-flood", "mute"}

// startAttack starts the attack named by -attack. It returns at once,
// except for ask-flood, whose server reads nothing more, for good. The
// attacks that write garbage hold the output from the start, so that no
// answer goes out before the garbage.
func (f *fake) startAttack() {
	switch f.attack {
	case "endless-header":
		f.wmu.Lock()
		go f.raw("Content-Length: 10", bytes.Repeat([]byte("x"), 64<<10))
	case "huge-body":
		f.wmu.Lock()
		go f.raw("Content-Length: 1073741824\r\n\r\n", bytes.Repeat([]byte(`"`), 64<<10))
	case "header-flood":
		f.wmu.Lock()
		go f.raw("Content-Length: 10\r\n", []byte(strings.Repeat("X-Junk: 0123456789abcdef\r\n", 2048)))
	case "ask-flood":
		go func() {
			for i := 0; ; i++ {
				f.send(map[string]any{"jsonrpc": "2.0", "id": fmt.Sprintf("ask-%d", i), "method": "window/showMessageRequest",
					"params": map[string]any{"type": 3, "message": "Reload the workspace?", "actions": []any{map[string]any{"title": "Reload"}}}})
			}
		}()
		time.Sleep(time.Hour)
	case "log-flood":
		go func() {
			msg := map[string]any{"jsonrpc": "2.0", "method": "window/logMessage",
				"params": map[string]any{"type": 4, "message": "fakelsp: indexing " + strings.Repeat("very ", 20) + "busily"}}
			b, _ := json.Marshal(msg)
			frame := fmt.Appendf(nil, "Content-Length: %d\r\n\r\n%s", len(b), b)
			// Sixteen messages a write keep the fake's side cheap; each goes
			// whole, under the lock, so that answers still fit between them.
			batch := bytes.Repeat(frame, 16)
			for {
				f.wmu.Lock()
				_, err := f.out.Write(batch)
				f.wmu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	case "stderr-flood":
		go func() {
			lines := []byte(strings.Repeat("fakelsp: "+strings.Repeat("noise ", 12)+"\n", 512))
			for {
				if _, err := os.Stderr.Write(lines); err != nil {
					return
				}
			}
		}()
	case "mute":
	default:
		fmt.Fprintf(os.Stderr, "fakelsp: unknown attack %q\n", f.attack)
		os.Exit(2)
	}
}

// raw writes head once and then body for ever, holding the output, which
// its caller locked, so that nothing else is written in between, until the
// output is closed.
func (f *fake) raw(head string, body []byte) {
	defer f.wmu.Unlock()
	if _, err := f.out.Write([]byte(head)); err != nil {
		return
	}
	for {
		if _, err := f.out.Write(body); err != nil {
			return
		}
	}
}

// mute says whether a message is left unanswered: under the mute attack,
// every request but initialize and shutdown.
func (f *fake) mute(m message) bool {
	return f.attack == "mute" && len(m.ID) > 0 && m.Method != "initialize" && m.Method != "shutdown"
}
