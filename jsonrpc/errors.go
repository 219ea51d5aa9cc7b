package jsonrpc

import (
	"context"
	"errors"
	"strings"

	"github.com/coder/acp-go-sdk"
)

// Error is a JSON-RPC error as it goes on the wire: acp-go-sdk's
// RequestError, whose bytes are the reference (code, message, data).
type Error = acp.RequestError

// Kind is one of the errors JSON-RPC and ACP name, by its code and its
// message: a package value, compared with Is, made into an error to answer
// with by With or Data.
type Kind struct {
	Code    int
	Message string
}

// The errors mm answers with. Their messages are JSON-RPC's and ACP's
// words, as the SDK writes them; what went wrong goes in data, as
// {"error": why}, unless a Kind says the why in its message (Internal).
var (
	ErrParse          = Kind{-32700, "Parse error"}
	ErrInvalidRequest = Kind{-32600, "Invalid request"}
	ErrMethodNotFound = Kind{-32601, "Method not found"}
	ErrInvalidParams  = Kind{-32602, "Invalid params"}
	ErrInternal       = Kind{-32603, "Internal error"}
	ErrAuthRequired   = Kind{-32000, "Authentication required"}
	// ErrUnknownSession is ACP's resource-not-found, for a session the
	// connection's owner has none of.
	ErrUnknownSession = Kind{-32002, "Resource not found"}
	ErrCancelled      = Kind{-32800, "Request cancelled"}
)

// With is an error of k whose data says why: {"error": why}.
func (k Kind) With(why string) *Error { return k.Data(map[string]any{"error": why}) }

// Data is an error of k with data as it is.
func (k Kind) Data(data any) *Error { return &Error{Code: k.Code, Message: k.Message, Data: data} }

// Is says whether err is an error of k (by its code).
func (k Kind) Is(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == k.Code
}

// Internal is an internal error (-32603) whose message is reason, made one
// line, as editors show a message and little else; data, when given, is
// kept beside it, and says the reason under "error" too.
func Internal(reason string, data map[string]any) *Error {
	reason = strings.Join(strings.Fields(reason), " ")
	if reason == "" {
		reason = ErrInternal.Message
	}
	d := map[string]any{"error": reason}
	for k, v := range data {
		if k != "error" {
			d[k] = v
		}
	}
	return &Error{Code: ErrInternal.Code, Message: reason, Data: d}
}

// Refused is an error of k whose message says why, for a refusal an
// editor must show as it is (its data says it too): a prompt refused
// because too many wait on its session.
func Refused(k Kind, why string) *Error {
	return &Error{Code: k.Code, Message: why, Data: map[string]any{"error": why}}
}

// ErrorOf is err as an error to answer with: a wire error as it is, a
// cancelled context as ErrCancelled, anything else as Internal with its
// text as the reason.
func ErrorOf(err error) *Error {
	var e *Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &e):
		return e
	case errors.Is(err, context.Canceled):
		return ErrCancelled.With(err.Error())
	}
	return Internal(err.Error(), nil)
}
