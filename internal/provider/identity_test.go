package provider

import (
	"context"
	"reflect"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/resource"
)

// The import ID an identity makes is the one each resource's import by ID
// documents, with the host prefix only for a host of the hosts map.
func TestIdentityImportIDs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		spec identitySpec
		v    map[string]string
		want string
	}{
		{vmIdentity, map[string]string{"uuid": "6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"}, "6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"},
		{vmIdentity, map[string]string{"host": "gpu2", "uuid": "6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"}, "gpu2/6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5b"},
		{volumeIdentity, map[string]string{"pool": "default", "name": "web-seed.iso"}, "default/web-seed.iso"},
		{volumeIdentity, map[string]string{"host": "gpu2", "pool": "images", "name": "debian.qcow2"}, "gpu2/images/debian.qcow2"},
		{gpuBindingIdentity, map[string]string{"address": "0000:41:00.0"}, "0000:41:00.0"},
		{gpuBindingIdentity, map[string]string{"host": "gpu2", "address": "0000:41:00.0"}, "gpu2/0000:41:00.0"},
		{mdevIdentity, map[string]string{"uuid": "6b6f6861-6b75-4d64-8000-000000000001"}, "6b6f6861-6b75-4d64-8000-000000000001"},
		{mdevIdentity, map[string]string{"host": "gpu2", "uuid": "6b6f6861-6b75-4d64-8000-000000000001"}, "gpu2/6b6f6861-6b75-4d64-8000-000000000001"},
		{poolIdentity, map[string]string{"name": "default"}, "default"},
		{poolIdentity, map[string]string{"host": "gpu2", "name": "vms"}, "gpu2/vms"},
		{networkIdentity, map[string]string{"name": "default"}, "default"},
		{networkIdentity, map[string]string{"host": "gpu2", "name": "lan"}, "gpu2/lan"},
	}
	for _, c := range cases {
		if got := c.spec.importID(c.v); got != c.want {
			t.Errorf("importID(%v) = %q, want %q", c.v, got, c.want)
		}
		// Every identity attribute is a state attribute the import sets.
		if names := c.spec.names(); names[0] != "host" || len(names) != len(c.spec.attrs)+1 {
			t.Errorf("identity attributes %v do not start with host", names)
		}
	}
	if host, pool, name, ok := splitVolumeID(volumeIdentity.importID(map[string]string{"host": "gpu2", "pool": "images", "name": "d.qcow2"})); !ok || host != "gpu2" || pool != "images" || name != "d.qcow2" {
		t.Errorf("the volume import ID does not split back: %q %q %q %v", host, pool, name, ok)
	}
	// Pools and networks import by name through the one parser both use.
	for _, spec := range []identitySpec{poolIdentity, networkIdentity} {
		for _, v := range []map[string]string{{"name": "default"}, {"host": "gpu2", "name": "lan"}} {
			if host, name, ok := parseNameImportID(spec.importID(v)); !ok || host != v["host"] || name != v["name"] {
				t.Errorf("import ID of %v splits back as %q %q %v", v, host, name, ok)
			}
		}
	}
}

// Each wrapper serves the resource its constructor makes, and implements
// exactly the framework's optional interfaces that resource implements: the
// wrappers are generic and cannot embed the resource, so a new interface on
// a resource needs its forwarder in identity_resources.go.
func TestIdentityWrappers(t *testing.T) {
	t.Parallel()
	optional := map[string]func(any) bool{
		"Configure":        func(r any) bool { _, ok := r.(resource.ResourceWithConfigure); return ok },
		"ConfigValidators": func(r any) bool { _, ok := r.(resource.ResourceWithConfigValidators); return ok },
		"ImportState":      func(r any) bool { _, ok := r.(resource.ResourceWithImportState); return ok },
		"ModifyPlan":       func(r any) bool { _, ok := r.(resource.ResourceWithModifyPlan); return ok },
		"MoveState":        func(r any) bool { _, ok := r.(resource.ResourceWithMoveState); return ok },
		"UpgradeState":     func(r any) bool { _, ok := r.(resource.ResourceWithUpgradeState); return ok },
		"ValidateConfig":   func(r any) bool { _, ok := r.(resource.ResourceWithValidateConfig); return ok },
		"UpgradeIdentity":  func(r any) bool { _, ok := r.(resource.ResourceWithUpgradeIdentity); return ok },
	}
	for name, newWrapper := range map[string]func() resource.Resource{
		"kohaku_vm":          newVMResourceWithIdentity,
		"kohaku_seed":        newSeedResourceWithIdentity,
		"kohaku_image":       newImageResourceWithIdentity,
		"kohaku_gpu_binding": newGPUBindingResourceWithIdentity,
		"kohaku_mdev":        newMdevResourceWithIdentity,
		"kohaku_gpu_sriov":   newGPUSRIOVResourceWithIdentity,
		"kohaku_vgpu":        newVGPUResourceWithIdentity,
		"kohaku_pool":        newPoolResourceWithIdentity,
		"kohaku_network":     newNetworkResourceWithIdentity,
		"kohaku_backup":      newBackupResourceWithIdentity,
	} {
		w := newWrapper()
		u, ok := w.(interface{ unwrap() resource.Resource })
		if !ok {
			t.Errorf("%s: the wrapper serves no resource", name)
			continue
		}
		inner := u.unwrap()
		if v := reflect.ValueOf(inner); !v.IsValid() || v.IsNil() {
			t.Errorf("%s: the wrapper serves no resource", name)
			continue
		}
		if _, ok := w.(resource.ResourceWithIdentity); !ok {
			t.Errorf("%s: the wrapper has no identity", name)
		}
		for iface, has := range optional {
			if has(inner) != has(w) {
				t.Errorf("%s: the resource implements %s: %v, its wrapper: %v", name, iface, has(inner), has(w))
			}
		}
	}
}

// Each list resource lists a managed resource of its name that has an
// identity, and the provider serves that resource with it: terraform query
// writes import blocks by identity from the list's results.
func TestListResourcesHaveIdentity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := &kohakuProvider{}
	managed := map[string]resource.Resource{}
	for _, newResource := range p.Resources(ctx) {
		r := newResource()
		var meta resource.MetadataResponse
		r.Metadata(ctx, resource.MetadataRequest{ProviderTypeName: "kohaku"}, &meta)
		managed[meta.TypeName] = r
	}
	for _, newList := range p.ListResources(ctx) {
		l := newList()
		var meta resource.MetadataResponse
		l.Metadata(ctx, resource.MetadataRequest{ProviderTypeName: "kohaku"}, &meta)
		r, ok := managed[meta.TypeName].(resource.ResourceWithIdentity)
		if !ok {
			t.Errorf("list resource %s: the provider serves no %s with an identity", meta.TypeName, meta.TypeName)
			continue
		}
		var id resource.IdentitySchemaResponse
		r.IdentitySchema(ctx, resource.IdentitySchemaRequest{}, &id)
		if _, ok := id.IdentitySchema.Attributes["host"]; !ok {
			t.Errorf("%s: identity without host", meta.TypeName)
		}
	}
}
