package grains

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/mm-agent/mm/configs"
)

// A provider this mm was built without is refused with the build tag that
// adds it, not with "unknown provider".
func TestProviderLeftOutNamesItsTag(t *testing.T) {
	for name := range providerTags {
		t.Run(name, func(t *testing.T) {
			if _, ok := providers[name]; ok {
				t.Skipf("built with -tags %s", name)
			}
			_, err := newProvider(configs.Cluster{Provider: name}, "127.0.0.1", nil, nil, slog.New(slog.DiscardHandler), slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), "go build -tags "+name) {
				t.Fatalf("got %v, want the tag named", err)
			}
		})
	}
}
