package pgtest

import (
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/mm-agent/mm/internal/testwait"
)

var shared Shared

func TestMain(m *testing.M) {
	code := m.Run()
	shared.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

// TestServer: the throwaway server takes connections, and each schema is a
// test's own.
func TestServer(t *testing.T) {
	testwait.Short(t, "starting a PostgreSQL server")
	ctx := testwait.Context(t)
	a, b := shared.URL(t), shared.URL(t)
	for _, url := range []string{a, b} {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE x (n int)"); err != nil {
			t.Errorf("%s: %v", url, err)
		}
		conn.Close(ctx)
	}
}
