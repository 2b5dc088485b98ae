package provider

import (
	"context"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/vmlife"
)

// nicList builds a network_interface list from "type/source/model/mac"
// entries; "?" is an unknown mac and "" a null one.
func nicList(t *testing.T, nics ...[4]string) types.List {
	t.Helper()
	var elems []attr.Value
	for _, n := range nics {
		str := func(s string) types.String {
			switch s {
			case "":
				return types.StringNull()
			case "?":
				return types.StringUnknown()
			}
			return types.StringValue(s)
		}
		elems = append(elems, types.ObjectValueMust(vmNICAttrTypes, map[string]attr.Value{
			"type": str(n[0]), "source": str(n[1]), "model": str(n[2]), "mac": str(n[3]),
		}))
	}
	return types.ListValueMust(types.ObjectType{AttrTypes: vmNICAttrTypes}, elems)
}

func TestKeepNICMACs(t *testing.T) {
	t.Parallel()
	state := nicList(t,
		[4]string{"user", "", "virtio", "52:54:00:00:00:01"},
		[4]string{"bridge", "br0", "virtio", "52:54:00:00:00:02"},
		[4]string{"user", "", "e1000e", "52:54:00:00:00:03"},
	)
	cases := map[string]struct {
		plan, config types.List
		want         []string // planned MACs, "?" for unknown
	}{
		"unchanged": {
			plan:   nicList(t, [4]string{"user", "", "virtio", "?"}, [4]string{"bridge", "br0", "virtio", "?"}, [4]string{"user", "", "e1000e", "?"}),
			config: nicList(t, [4]string{"user", "", "", ""}, [4]string{"bridge", "br0", "", ""}, [4]string{"user", "", "e1000e", ""}),
			want:   []string{"52:54:00:00:00:01", "52:54:00:00:00:02", "52:54:00:00:00:03"},
		},
		"first removed": {
			plan:   nicList(t, [4]string{"bridge", "br0", "virtio", "?"}, [4]string{"user", "", "e1000e", "?"}),
			config: nicList(t, [4]string{"bridge", "br0", "", ""}, [4]string{"user", "", "e1000e", ""}),
			want:   []string{"52:54:00:00:00:02", "52:54:00:00:00:03"},
		},
		"one added in front": {
			plan:   nicList(t, [4]string{"user", "", "rtl8139", "?"}, [4]string{"user", "", "virtio", "?"}),
			config: nicList(t, [4]string{"user", "", "rtl8139", ""}, [4]string{"user", "", "", ""}),
			want:   []string{"?", "52:54:00:00:00:01"},
		},
		"explicit MAC wins and is not reused": {
			plan:   nicList(t, [4]string{"user", "", "virtio", "52:54:00:00:00:01"}, [4]string{"user", "", "virtio", "?"}),
			config: nicList(t, [4]string{"user", "", "", "52:54:00:00:00:01"}, [4]string{"user", "", "", ""}),
			want:   []string{"52:54:00:00:00:01", "?"},
		},
		"changed model is a new interface": {
			plan:   nicList(t, [4]string{"user", "", "e1000", "?"}),
			config: nicList(t, [4]string{"user", "", "e1000", ""}),
			want:   []string{"?"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var diags diag.Diagnostics
			got := keepNICMACs(context.Background(), tc.plan, tc.config, state, &diags)
			if diags.HasError() {
				t.Fatal(diags)
			}
			var nics []vmNICModel
			got.ElementsAs(context.Background(), &nics, false)
			if len(nics) != len(tc.want) {
				t.Fatalf("got %d NICs, want %d", len(nics), len(tc.want))
			}
			for i, n := range nics {
				mac := n.MAC.ValueString()
				if n.MAC.IsUnknown() {
					mac = "?"
				}
				if mac != tc.want[i] {
					t.Errorf("NIC %d: mac %s, want %s", i, mac, tc.want[i])
				}
			}
		})
	}
}

func TestParseIDs(t *testing.T) {
	t.Parallel()
	if p, v, ok := parseVolumeID("default/web-1-seed.iso"); !ok || p != "default" || v != "web-1-seed.iso" {
		t.Errorf("parseVolumeID = %q, %q, %t", p, v, ok)
	}
	for _, bad := range []string{"", "web.iso", "/web.iso", "default/", "a/b/c"} {
		if _, _, ok := parseVolumeID(bad); ok {
			t.Errorf("parseVolumeID(%q) accepted", bad)
		}
	}
	if h, a := vmlife.ParseGPUID("gpu2/0000:01:00.0"); h != "gpu2" || a != "0000:01:00.0" {
		t.Errorf("ParseGPUID = %q, %q", h, a)
	}
	if h, a := vmlife.ParseGPUID("0000:01:00.0"); h != "" || a != "0000:01:00.0" {
		t.Errorf("ParseGPUID = %q, %q", h, a)
	}
}
