package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/kohaku/terraform-provider-kohaku/internal/guestaddr"
)

// Refresh's fresh addresses replace guest.addresses and nothing else of
// what create recorded; a guest create did not wait for gets an object with
// only its addresses.
func TestWithGuestAddresses(t *testing.T) {
	t.Parallel()
	fresh := []guestaddr.Address{{Interface: "eth0", MAC: "52:54:00:00:00:01", Address: "10.0.2.99/24"}}
	addrOf := func(g types.Object) string {
		l := g.Attributes()["addresses"].(types.List)
		if len(l.Elements()) != 1 {
			t.Fatalf("addresses %v", l)
		}
		return l.Elements()[0].(types.Object).Attributes()["address"].(types.String).ValueString()
	}

	got := withGuestAddresses(nullGuest(), fresh)
	if got.IsNull() || addrOf(got) != "10.0.2.99/24" {
		t.Fatalf("from a null guest: %v", got)
	}
	for k, v := range got.Attributes() {
		if k != "addresses" && !v.IsNull() {
			t.Errorf("from a null guest, %s = %v, want null", k, v)
		}
	}

	recorded := withGuestAddresses(nullGuest(), []guestaddr.Address{{Interface: "eth0", Address: "10.0.2.15/24"}})
	attrs := recorded.Attributes()
	with := map[string]attr.Value{}
	for k, v := range attrs {
		with[k] = v
	}
	with["hostname"] = types.StringValue("e2e-guest")
	prior := types.ObjectValueMust(guestAttrTypes, with)
	got = withGuestAddresses(prior, fresh)
	if addrOf(got) != "10.0.2.99/24" {
		t.Errorf("addresses not renewed: %v", got)
	}
	if h := got.Attributes()["hostname"].(types.String).ValueString(); h != "e2e-guest" {
		t.Errorf("hostname %q, want what create recorded", h)
	}
	if empty := withGuestAddresses(prior, nil).Attributes()["addresses"].(types.List); empty.IsNull() || len(empty.Elements()) != 0 {
		t.Errorf("a guest with no address: %v, want an empty list", empty)
	}
}
