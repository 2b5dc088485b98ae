package provider

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"
	tfresource "github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/kohaku/terraform-provider-kohaku/internal/seed"
)

// A shared folder on kohaku_seed takes kohaku_vm's names, driver and
// read_only; the former names, type and readonly, still work and render the
// same seed, byte for byte, so renaming them changes nothing on the host.
func TestSeedSharedFolderNewAndOldNamesRenderTheSame(t *testing.T) {
	t.Parallel()
	render := func(t *testing.T, mt seedMountModel) (*seed.Result, seed.Mount) {
		t.Helper()
		mt.Tag, mt.Path = types.StringValue("kohaku_shared"), types.StringValue("/shared")
		m := seedResourceModel{
			Name:          types.StringValue("names-seed.iso"),
			Format:        types.StringValue(string(seed.FormatNoCloud)),
			SharedFolders: []seedMountModel{mt},
		}
		spec, diags := m.spec(&m, "")
		if diags.HasError() {
			t.Fatalf("spec: %v", diags)
		}
		res, err := seed.Render(spec)
		if err != nil {
			t.Fatalf("render: %v", err)
		}
		return res, spec.Mounts[0]
	}
	cases := map[string]struct {
		old, new seedMountModel
		want     seed.Mount
	}{
		"virtiofs, read-only": {
			old:  seedMountModel{Type: types.StringValue("virtiofs"), ReadOnlyOld: types.BoolValue(true)},
			new:  seedMountModel{Driver: types.StringValue("virtiofs"), ReadOnly: types.BoolValue(true)},
			want: seed.Mount{Type: seed.MountVirtioFS, Tag: "kohaku_shared", Path: "/shared", ReadOnly: true},
		},
		"9p, read-write": {
			old:  seedMountModel{Type: types.StringValue("9p"), ReadOnlyOld: types.BoolValue(false)},
			new:  seedMountModel{Driver: types.StringValue("9p"), ReadOnly: types.BoolValue(false)},
			want: seed.Mount{Type: seed.Mount9P, Tag: "kohaku_shared", Path: "/shared"},
		},
		"defaults": {
			old:  seedMountModel{Type: types.StringNull(), ReadOnlyOld: types.BoolNull()},
			new:  seedMountModel{Driver: types.StringNull(), ReadOnly: types.BoolNull()},
			want: seed.Mount{Type: seed.Mount9P, Tag: "kohaku_shared", Path: "/shared"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			oldRes, oldMount := render(t, tc.old)
			newRes, newMount := render(t, tc.new)
			if oldMount != tc.want || newMount != tc.want {
				t.Errorf("mount from the old names %+v, from the new %+v, want %+v", oldMount, newMount, tc.want)
			}
			if oldRes.ISOSHA256 != newRes.ISOSHA256 {
				t.Errorf("the old names render ISO %s, the new %s: want the same seed", oldRes.ISOSHA256, newRes.ISOSHA256)
			}
			ud := string(newRes.Files["user-data"])
			if !strings.Contains(ud, "kohaku_shared") {
				t.Fatalf("user-data does not mount the folder:\n%s", ud)
			}
			if got := strings.Contains(ud, string(tc.want.Type)); !got {
				t.Errorf("user-data does not mount it with %s:\n%s", tc.want.Type, ud)
			}
		})
	}
}

// The former names say what replaces them, and setting a name and its
// former name together fails at plan time, on the former name.
func TestSeedSharedFolderOldNamesDeprecated(t *testing.T) {
	t.Parallel()
	var sr resource.SchemaResponse
	(&seedResource{}).Schema(context.Background(), resource.SchemaRequest{}, &sr)
	folder := sr.Schema.Attributes["shared_folders"].(schema.ListNestedAttribute).NestedObject.Attributes
	for old, replacement := range map[string]string{"type": "driver", "readonly": "read_only"} {
		if msg := folder[old].GetDeprecationMessage(); !strings.Contains(msg, "Use "+replacement) {
			t.Errorf("shared_folders.%s: deprecation message %q does not name %s", old, msg, replacement)
		}
		if msg := folder[replacement].GetDeprecationMessage(); msg != "" {
			t.Errorf("shared_folders.%s is deprecated: %q", replacement, msg)
		}
	}

	for name, tc := range map[string]struct{ body, want string }{
		"type and driver": {
			body: `{ tag = "kohaku_shared", path = "/shared", type = "9p", driver = "virtiofs" }`,
			want: `(?s)Invalid Attribute Combination.*"shared_folders\[0\]\.driver" cannot be specified when\s+"shared_folders\[0\]\.type" is specified`,
		},
		"readonly and read_only": {
			body: `{ tag = "kohaku_shared", path = "/shared", readonly = true, read_only = true }`,
			want: `(?s)Invalid Attribute Combination.*"shared_folders\[0\]\.read_only" cannot be specified when\s+"shared_folders\[0\]\.readonly" is specified`,
		},
		"unknown driver": {
			body: `{ tag = "kohaku_shared", path = "/shared", driver = "nfs" }`,
			want: `(?s)shared_folders\[0\]\.driver.*value must be one of`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tfresource.UnitTest(t, tfresource.TestCase{
				ProtoV6ProviderFactories: protoV6Providers,
				Steps: []tfresource.TestStep{{
					Config: providerBlock("qemu:///system?socket=/nonexistent/kohaku.sock") + `
resource "kohaku_seed" "both" {
  name           = "both-seed.iso"
  shared_folders = [` + tc.body + `]
}
`,
					PlanOnly:    true,
					ExpectError: regexp.MustCompile(tc.want),
				}},
			})
		})
	}
}
