package app

import (
	"errors"
	"strings"
	"testing"

	"github.com/mm-agent/mm/configs"
)

// A config the runtime cannot use stops mm before it serves anything,
// with the setting named.
func TestNewHubRefusesABadConfig(t *testing.T) {
	cfg, err := configs.Load("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Sessions.Dir = t.TempDir()
	cfg.Tools.Sensitive = append(cfg.Tools.Sensitive, "[z-a")
	_, err = NewHub(Options{Config: cfg, StateDir: t.TempDir()})
	if !errors.Is(err, configs.ErrConfig) || !strings.Contains(err.Error(), "tools.sensitive") {
		t.Fatalf("NewHub with a bad pattern: %v; want a config error naming tools.sensitive", err)
	}
}

// A store.url whose database cannot be reached stops mm at start, not at
// its first save.
func TestNewHubRefusesAnUnreachableStore(t *testing.T) {
	cfg, err := configs.Load("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store.URL = "postgres://mm@127.0.0.1:1/mm?connect_timeout=2"
	if _, err := NewHub(Options{Config: cfg, StateDir: t.TempDir()}); err == nil {
		t.Fatal("NewHub with an unreachable store.url succeeded")
	}
}
