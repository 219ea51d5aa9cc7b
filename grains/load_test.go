package grains

import "testing"

// TestLoadKeeps: a node keeps a session while it holds at most the
// members' mean plus a quarter of it, or plus eight when that is more,
// and always while it knows no other member's count.
func TestLoadKeeps(t *testing.T) {
	for _, tc := range []struct {
		v    loadView
		own  int
		want bool
	}{
		{loadView{}, 1000, true},                     // no count yet
		{loadView{others: 1, sum: 0}, 16, true},      // mean 8: 8 + 8
		{loadView{others: 1, sum: 0}, 17, false},     // mean 8.5: 16.5
		{loadView{others: 2, sum: 200}, 100, true},   // mean 100
		{loadView{others: 2, sum: 200}, 133, true},   // mean 111: 111 + 27.8
		{loadView{others: 2, sum: 200}, 200, false},  // mean 133: 133 + 33
		{loadView{others: 2, sum: 2000}, 1300, true}, // mean 1100: 1100 + 275
		{loadView{others: 2, sum: 2000}, 1500, false},
	} {
		if got := tc.v.keeps(tc.own); got != tc.want {
			t.Errorf("%+v keeps with %d: %v, want %v", tc.v, tc.own, got, tc.want)
		}
	}
}
