// Package rpcerr builds the JSON-RPC errors mm answers with when it fails
// itself. Editors show an error's message and little else, so the one-line
// reason is the message; data keeps it under "error" too, with any details,
// as ACP's own errors do.
package rpcerr

import (
	"strings"

	"github.com/coder/acp-go-sdk"
)

// Internal is an internal error (-32603) whose message is reason, made one
// line; data, when given, is kept beside it.
func Internal(reason string, data map[string]any) *acp.RequestError {
	reason = strings.Join(strings.Fields(reason), " ")
	if reason == "" {
		reason = "Internal error"
	}
	d := map[string]any{"error": reason}
	for k, v := range data {
		if k != "error" {
			d[k] = v
		}
	}
	return &acp.RequestError{Code: -32603, Message: reason, Data: d}
}
