package admin

import "testing"

func TestHumanCount(t *testing.T) {
	tests := []struct {
		v           float64
		human, full string
	}{
		{0, "0", "0"},
		{999, "999", "999"},
		{9999, "9999", "9,999"},
		{12345, "12.3k", "12,345"},
		{123456, "123k", "123,456"},
		{999999, "1.00M", "999,999"},
		{4567890, "4.57M", "4,567,890"},
		{1.5, "1.5", "1.5"},
		{-12345, "-12.3k", "-12,345"},
	}
	for _, tc := range tests {
		if got := humanCount(tc.v); got != tc.human {
			t.Errorf("humanCount(%v) = %q, want %q", tc.v, got, tc.human)
		}
		if got := thousands(tc.v); got != tc.full {
			t.Errorf("thousands(%v) = %q, want %q", tc.v, got, tc.full)
		}
	}
	if share(199, 200) != 99 || share(0, 0) != 100 || share(1, 3) != 33 {
		t.Errorf("share rounds wrong: %d %d %d", share(199, 200), share(0, 0), share(1, 3))
	}
}
