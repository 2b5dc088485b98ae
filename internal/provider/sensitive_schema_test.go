package provider

import (
	"context"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
)

// TestSecretsAreSensitive: attributes that may hold secrets (a file's
// content, meta-data values, a URL with a password) are sensitive, so
// plans do not show them.
func TestSecretsAreSensitive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		res   resource.Resource
		paths []path.Path
	}{
		{newSeedResource(), []path.Path{
			path.Root("meta_data"),
			path.Root("write_files").AtListIndex(0).AtName("content"),
			path.Root("write_files").AtListIndex(0).AtName("content_base64"),
		}},
		{newImageResource(), []path.Path{path.Root("source"), path.Root("checksum_url")}},
	} {
		var resp resource.SchemaResponse
		tc.res.Schema(ctx, resource.SchemaRequest{}, &resp)
		if resp.Diagnostics.HasError() {
			t.Fatal(resp.Diagnostics)
		}
		for _, p := range tc.paths {
			a, diags := resp.Schema.AttributeAtPath(ctx, p)
			if diags.HasError() {
				t.Fatalf("%s: %v", p, diags)
			}
			if !a.IsSensitive() {
				t.Errorf("%s is not sensitive", p)
			}
		}
	}
}
