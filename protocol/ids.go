package protocol

import (
	"encoding/json"

	"github.com/mm-agent/mm/jsonrpc"
)

// Request ids, and what the ingress reads of a message before it decodes it.

// idKey is jsonrpc.IDKey: how every part of mm compares request ids.
func idKey(raw json.RawMessage) string { return jsonrpc.IDKey(raw) }

// headID is jsonrpc.HeadID.
func headID(head []byte) json.RawMessage { return jsonrpc.HeadID(head) }

// validID is jsonrpc.ValidID.
func validID(raw json.RawMessage) bool { return jsonrpc.ValidID(raw) }
