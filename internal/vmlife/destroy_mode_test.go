package vmlife

import (
	"strings"
	"testing"
	"time"
)

func TestDestroyGrace(t *testing.T) {
	const timeout = 30 * time.Second
	share := []string{"shared folder /srv/data"}
	for _, c := range []struct {
		mode      DestroyMode
		survivors []string
		want      time.Duration
		why       string
	}{
		{DestroyAuto, nil, 0, "every disk goes with the VM"},
		{DestroyAuto, share, timeout, "/srv/data"},
		{DestroyAuto, []string{"boot volume default/data.qcow2", "shared folder /a"}, timeout, "default/data.qcow2, shared folder /a"},
		{DestroyGraceful, nil, timeout, "graceful"},
		{DestroyGraceful, share, timeout, "graceful"},
		{DestroyForce, share, 0, "force"},
		{DestroyForce, nil, 0, "force"},
		{"", share, timeout, "outlives"}, // unset (an older state) is auto
	} {
		got, why := DestroyGrace(c.mode, timeout, c.survivors)
		if got != c.want || !strings.Contains(why, c.why) {
			t.Errorf("DestroyGrace(%q, %v): got %v (%q), want %v (...%s...)", c.mode, c.survivors, got, why, c.want, c.why)
		}
	}
	if DestroyModes[0] != DestroyAuto {
		t.Errorf("the default mode must come first: %v", DestroyModes)
	}
}
