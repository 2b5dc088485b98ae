package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/types"
)

// State written by versions that stored "" for a missing document or URL
// reads back as null, the value plans compute now, so upgrading plans no
// change; values that are there, and unknowns, are kept.
func TestSeedStateDropsEmptyDocuments(t *testing.T) {
	m := seedResourceModel{
		PhoneHomeURL:          types.StringValue(""),
		RenderedNetworkConfig: types.StringUnknown(),
		RenderedVendorData:    types.StringValue(""),
		RenderedMetaData:      types.StringValue(""),
	}
	m.dropEmptyDocuments()
	for name, got := range map[string]types.String{"phone_home_url": m.PhoneHomeURL, "rendered_vendor_data": m.RenderedVendorData} {
		if !got.IsNull() {
			t.Errorf("%s: want null, got %s", name, got)
		}
	}
	kept := seedResourceModel{RenderedVendorData: types.StringValue("#cloud-config\n")}
	kept.dropEmptyDocuments()
	if kept.RenderedVendorData.ValueString() != "#cloud-config\n" {
		t.Errorf("rendered_vendor_data lost its value: %s", kept.RenderedVendorData)
	}
	if !m.RenderedNetworkConfig.IsUnknown() {
		t.Errorf("rendered_network_config: an unknown must stay unknown, got %s", m.RenderedNetworkConfig)
	}
	// meta-data always exists: it is not one of the optional documents.
	if m.RenderedMetaData.IsNull() {
		t.Errorf("rendered_meta_data was nulled")
	}
	if got := nullIfNone(""); !got.IsNull() {
		t.Errorf(`nullIfNone(""): want null, got %s`, got)
	}
	if got := nullIfNone("x"); got.ValueString() != "x" {
		t.Errorf(`nullIfNone("x"): got %s`, got)
	}
}
