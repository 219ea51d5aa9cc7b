package protocol

import (
	"testing"

	"github.com/mm-agent/mm/acpmethod"
)

// TestOneMethodTable: the methods mm serves are acpmethod's, each with the
// placement the table says, and every request of the table's that a
// client sends is served: the table is not restated here.
func TestOneMethodTable(t *testing.T) {
	for name, def := range methods {
		m, ok := acpmethod.Lookup(name)
		if !ok {
			t.Errorf("%s is served but not in acpmethod's table", name)
			continue
		}
		if def.session != (m.Ordered && !m.Creates) || def.creates != m.Creates {
			t.Errorf("%s: served as session=%v creates=%v, the table says ordered=%v creates=%v", name, def.session, def.creates, m.Ordered, m.Creates)
		}
	}
	for _, m := range acpmethod.All() {
		if m.Notification || m.ToClient {
			continue
		}
		if _, ok := methods[m.Name]; !ok {
			t.Errorf("acpmethod names %s, which mm does not serve", m.Name)
		}
	}
}
