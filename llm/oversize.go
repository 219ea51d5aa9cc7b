package llm

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// This file rewrites a stream event longer than the provider's library
// reads in one line into several events that mean the same to it.
//
// langchaingo (v0.1.14) reads each stream with a bufio.Scanner: at its
// default 64 KiB per line for OpenAI and Anthropic, at 512,000 bytes for
// Ollama. A longer line fails an OpenAI or Anthropic call with "bufio.Scanner:
// token too long", and silently ends an Ollama stream there, the answer lost.
// Servers that buffer send such lines: vLLM with a tool parser sends a tool
// call's whole arguments in one delta (a write_file of a 100 KB file), and
// some proxies relay a whole answer as one event. The text of a delta, its
// reasoning and a tool call's arguments are strings the library appends
// event after event, so cut into pieces they rebuild the same answer; any
// other event that long fails the call, saying so, rather than losing part
// of the answer.

// The longest lines, their newline included, that langchaingo's clients
// read.
const (
	// sseLineLimit: the OpenAI and Anthropic clients' default scanner.
	sseLineLimit = bufio.MaxScanTokenSize
	// ollamaLineLimit: the Ollama client's scanner buffer (maxBufferSize
	// in its ollamaclient).
	ollamaLineLimit = 512 * 1000
)

// maxEvent bounds what mm reads of one stream event (one line) before it
// gives up on the call. The longest event a sound server sends is one
// holding a whole tool call: its arguments are what the model wrote, at
// most its output limit (today 128k tokens at the most, about 512 KiB of
// text), escaped twice over (a JSON string of JSON), which can make 1 to
// 2 MiB of it. 8 MiB leaves that room four times over, while a runaway or
// hostile server costs a call at most that much memory, and about as much
// again for the rewrite, before it fails.
const maxEvent = 8 << 20

// errNotSplittable says that an event holds no text, reasoning or
// tool-call arguments long enough to cut it to size.
var errNotSplittable = errors.New("not text or tool-call arguments")

// splitter rewrites one event (an SSE data payload, or an NDJSON line)
// into events of the same meaning, each a JSON document under the line
// limit when the long strings are cut into pieces whose JSON takes at most
// room bytes. It returns errNotSplittable when it cannot.
type splitter func(event []byte, room int) ([][]byte, error)

// oversizeError is the failure of an event longer than the library reads
// that mm could not rewrite; size is the event's, limit the library's.
func oversizeError(size, limit int, why error) error {
	return serverErr("a stream event of %s (%v), over what mm can read in one event (%s)", byteSize(size), why, byteSize(limit))
}

// tooLongError is the failure of an event that reached maxEvent.
func tooLongError() error {
	return serverErr("a stream event over %s, more than mm reads of one event", byteSize(maxEvent))
}

// byteSize writes a byte count for people: 900 bytes, 64 KiB, 1.2 MiB.
func byteSize(n int) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d bytes", n)
	case n < 1<<20:
		return trimZero(fmt.Sprintf("%.1f", float64(n)/(1<<10))) + " KiB"
	default:
		return trimZero(fmt.Sprintf("%.1f", float64(n)/(1<<20))) + " MiB"
	}
}

func trimZero(s string) string {
	if len(s) > 2 && s[len(s)-2:] == ".0" {
		return s[:len(s)-2]
	}
	return s
}

// openAICut are the string fields of an OpenAI delta cut into pieces:
// langchaingo appends content and reasoning_content; reasoning, which
// some servers send beside or instead of it, it ignores, so that cutting
// it changes nothing either.
var openAICut = []string{"reasoning_content", "reasoning", "content"}

// splitOpenAI rewrites a chat completion chunk of one choice. Its delta's
// other fields come first, with the first piece; then each cut string's
// pieces, reasoning before content, as a model writes them; then each tool
// call in its order, the first piece of its arguments with its id, type and
// name, the others alone with its index: langchaingo takes a fragment with
// a type for a new call and appends one without to the last call, so that
// the calls must follow one another. The last event is the chunk itself
// with the last delta, keeping its finish_reason and usage, which
// langchaingo takes from whichever event comes last; the others carry the
// chunk's other fields (id, model…) and a null finish_reason.
func splitOpenAI(chunk []byte, room int) ([][]byte, error) {
	choices := gjson.GetBytes(chunk, "choices").Array()
	if len(choices) != 1 {
		// langchaingo reads only the first choice of a chunk: the
		// pieces of another would be read as the first's.
		return nil, errNotSplittable
	}
	delta := choices[0].Get("delta")
	if !delta.IsObject() {
		return nil, errNotSplittable
	}
	rest := []byte(delta.Raw)
	var err error
	var deltas [][]byte
	cut := false
	// next is the delta to add a piece to: the first holds the delta's
	// other fields. As cut is only set with two pieces added, the last
	// delta is never the first, and rest is never left over.
	next := func() []byte {
		if rest != nil {
			d := rest
			rest = nil
			return d
		}
		return []byte("{}")
	}
	type field struct {
		key    string
		pieces [][]byte
	}
	var fields []field
	for _, key := range openAICut {
		v := delta.Get(key)
		if v.Type != gjson.String {
			continue
		}
		pieces, err := cutJSONString(v.Raw, room)
		if err != nil {
			return nil, err
		}
		cut = cut || len(pieces) > 1
		fields = append(fields, field{key, pieces})
		if rest, err = sjson.DeleteBytes(rest, key); err != nil {
			return nil, err
		}
	}
	calls := delta.Get("tool_calls")
	if calls.IsArray() {
		if rest, err = sjson.DeleteBytes(rest, "tool_calls"); err != nil {
			return nil, err
		}
	}
	for _, f := range fields {
		for _, p := range f.pieces {
			d, err := sjson.SetRawBytes(next(), f.key, p)
			if err != nil {
				return nil, err
			}
			deltas = append(deltas, d)
		}
	}
	for _, call := range calls.Array() {
		frags := [][]byte{[]byte(call.Raw)}
		if args := call.Get("function.arguments"); args.Type == gjson.String {
			pieces, err := cutJSONString(args.Raw, room)
			if err != nil {
				return nil, err
			}
			if len(pieces) > 1 {
				cut = true
				frags, err = toolCallFragments(call, pieces)
				if err != nil {
					return nil, err
				}
			}
		}
		for _, frag := range frags {
			d, err := sjson.SetRawBytes(next(), "tool_calls", append(append([]byte("["), frag...), ']'))
			if err != nil {
				return nil, err
			}
			deltas = append(deltas, d)
		}
	}
	if !cut {
		return nil, errNotSplittable
	}
	// head is what each event but the last carries around its delta.
	head, err := sjson.DeleteBytes(chunk, "choices")
	if err == nil {
		head, err = sjson.DeleteBytes(head, "usage")
	}
	if err != nil {
		return nil, err
	}
	index := choices[0].Get("index")
	events := make([][]byte, 0, len(deltas))
	for _, d := range deltas[:len(deltas)-1] {
		choice := []byte(`{"delta":{},"finish_reason":null}`)
		if index.Exists() {
			choice, _ = sjson.SetRawBytes(choice, "index", []byte(index.Raw))
		}
		if choice, err = sjson.SetRawBytes(choice, "delta", d); err != nil {
			return nil, err
		}
		e, err := sjson.SetRawBytes(head, "choices", append(append([]byte("["), choice...), ']'))
		if err != nil {
			return nil, err
		}
		events = append(events, e)
	}
	last, err := sjson.SetRawBytes(chunk, "choices.0.delta", deltas[len(deltas)-1])
	if err != nil {
		return nil, err
	}
	return append(events, last), nil
}

// toolCallFragments cuts a tool-call fragment whose arguments are pieces:
// the first keeps every field of the call, the others hold only its index
// and their piece.
func toolCallFragments(call gjson.Result, pieces [][]byte) ([][]byte, error) {
	first, err := sjson.SetRawBytes([]byte(call.Raw), "function.arguments", pieces[0])
	if err != nil {
		return nil, err
	}
	frags := [][]byte{first}
	index := call.Get("index")
	for _, p := range pieces[1:] {
		frag := []byte(`{"function":{}}`)
		if index.Exists() {
			frag, _ = sjson.SetRawBytes(frag, "index", []byte(index.Raw))
		}
		if frag, err = sjson.SetRawBytes(frag, "function.arguments", p); err != nil {
			return nil, err
		}
		frags = append(frags, frag)
	}
	return frags, nil
}

// anthropicCut maps the delta types of a content_block_delta whose string
// langchaingo appends to that string's key.
var anthropicCut = map[string]string{
	"text_delta":       "text",
	"input_json_delta": "partial_json",
	"thinking_delta":   "thinking",
}

// splitAnthropic rewrites a content_block_delta into one per piece of its
// text, thinking or tool input, each otherwise the same event: each is
// complete in itself.
func splitAnthropic(event []byte, room int) ([][]byte, error) {
	if gjson.GetBytes(event, "type").Str != "content_block_delta" {
		return nil, errNotSplittable
	}
	key, ok := anthropicCut[gjson.GetBytes(event, "delta.type").Str]
	if !ok {
		return nil, errNotSplittable
	}
	return splitFields(event, []string{"delta." + key}, room, nil)
}

// splitOllama rewrites a chat line into one per piece of its message's
// content (and of its thinking, which langchaingo ignores); all but the
// last say "done": false, so that only the last ends the answer.
func splitOllama(line []byte, room int) ([][]byte, error) {
	if !json.Valid(line) {
		return nil, errNotSplittable
	}
	return splitFields(line, []string{"message.thinking", "message.content"}, room, func(e []byte) ([]byte, error) {
		if !gjson.GetBytes(e, "done").Exists() {
			return e, nil
		}
		return sjson.SetBytes(e, "done", false)
	})
}

// splitFields cuts the strings at paths in event: each piece but the last
// of each string is a copy of event that holds it, the other strings
// emptied, made a partial event by partial when set; the last is event
// itself with the last piece of each. The copies are made from event with
// its strings emptied, so that cutting costs in proportion to the event's
// length.
func splitFields(event []byte, paths []string, room int, partial func([]byte) ([]byte, error)) ([][]byte, error) {
	type field struct {
		path   string
		pieces [][]byte
	}
	var fields []field
	base := event
	cut := false
	for _, path := range paths {
		v := gjson.GetBytes(event, path)
		if v.Type != gjson.String {
			continue
		}
		pieces, err := cutJSONString(v.Raw, room)
		if err != nil {
			return nil, err
		}
		cut = cut || len(pieces) > 1
		fields = append(fields, field{path, pieces})
		if base, err = sjson.SetRawBytes(base, path, []byte(`""`)); err != nil {
			return nil, err
		}
	}
	if !cut {
		return nil, errNotSplittable
	}
	var err error
	if partial != nil {
		if base, err = partial(base); err != nil {
			return nil, err
		}
	}
	var events [][]byte
	for _, f := range fields {
		for _, p := range f.pieces[:len(f.pieces)-1] {
			e, err := sjson.SetRawBytes(base, f.path, p)
			if err != nil {
				return nil, err
			}
			events = append(events, e)
		}
	}
	last := event
	for _, f := range fields {
		if last, err = sjson.SetRawBytes(last, f.path, f.pieces[len(f.pieces)-1]); err != nil {
			return nil, err
		}
	}
	return append(events, last), nil
}

// cutJSONString cuts the JSON string raw into pieces, each a JSON string
// of at most room bytes (room holds at least one character: over 8 bytes),
// on character boundaries: decoded and joined, the pieces are what raw
// decodes to, as langchaingo's encoding/json decodes it. A string that
// fits is left as it is.
func cutJSONString(raw string, room int) ([][]byte, error) {
	if len(raw) <= room {
		return [][]byte{[]byte(raw)}, nil
	}
	var s string
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return nil, err
	}
	var pieces [][]byte
	start, size := 0, 2 // the quotes
	for i, r := range s {
		n := jsonSize(r)
		if size+n > room && i > start {
			pieces = append(pieces, jsonString(s[start:i]))
			start, size = i, 2
		}
		size += n
	}
	return append(pieces, jsonString(s[start:])), nil
}

// jsonSize is the most bytes encoding/json takes for r in a string.
func jsonSize(r rune) int {
	switch {
	case r < 0x20, r == '<', r == '>', r == '&', r == '\u2028', r == '\u2029', r == utf8.RuneError:
		return 6 // \u00XX, or \ufffd for a byte that is not UTF-8
	case r == '"', r == '\\':
		return 2
	default:
		return utf8.RuneLen(r)
	}
}

// jsonString is s as a JSON string; s is valid UTF-8, having been decoded.
func jsonString(s string) []byte {
	data, _ := json.Marshal(s) // a string always encodes
	return data
}
