package lsp

import "time"

type Config struct {
	Servers Servers
	Timeout time.Duration
}
