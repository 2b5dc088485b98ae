package provider

import (
	"strings"
	"testing"
)

func TestSnapshotIdentity(t *testing.T) {
	t.Parallel()
	if r := newSnapshotResourceWithIdentity().(snapshotWithIdentity); r.snapshotResource == nil {
		t.Error("kohaku_snapshot: the wrapper embeds no resource")
	}
	if got := snapshotIdentity.importID(map[string]string{"host": "gpu2", "vm_uuid": "u", "name": "n"}); got != "gpu2/u/n" {
		t.Errorf("import id %q", got)
	}
}

func TestParseSnapshotID(t *testing.T) {
	t.Parallel()
	const u = "5a1d9c4e-3f00-4b2a-9c1e-0d2f6b7a8e91"
	for id, want := range map[string][3]string{
		u + "/before":             {"", u, "before"},
		"gpu2/" + u + "/v1.2":     {"gpu2", u, "v1.2"},
		strings.ToUpper(u) + "/x": {"", u, "x"},
	} {
		h, uu, n, err := parseSnapshotID(id)
		if err != nil || [3]string{h, uu, n} != want {
			t.Errorf("parseSnapshotID(%q) = %q %q %q %v, want %v", id, h, uu, n, err, want)
		}
	}
	for _, bad := range []string{"", "before", "not-a-uuid/before", u + "/", u + "/a/b/c", "h/" + u + "/bad name"} {
		if _, _, _, err := parseSnapshotID(bad); err == nil || !strings.Contains(err.Error(), "<vm uuid>/<name>") {
			t.Errorf("parseSnapshotID(%q) = %v, want the expected form", bad, err)
		}
	}
}
