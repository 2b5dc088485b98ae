package provider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"

	"github.com/kohaku/terraform-provider-kohaku/internal/hosts/libvirthost"
	"github.com/kohaku/terraform-provider-kohaku/internal/seed"
)

// upgradeSeedState sends the attributes of a stored seed state of the
// given schema version through the provider's UpgradeResourceState, as
// Terraform does on the first plan after a provider upgrade, and returns
// the upgraded state read into the current model.
func upgradeSeedState(t *testing.T, version int64, attrs []byte) seedResourceModel {
	t.Helper()
	ctx := context.Background()
	srv, err := providerserver.NewProtocol6WithError(New("test", libvirthost.Connect)())()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.UpgradeResourceState(ctx, &tfprotov6.UpgradeResourceStateRequest{
		TypeName: "kohaku_seed",
		Version:  version,
		RawState: &tfprotov6.RawState{JSON: attrs},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range resp.Diagnostics {
		t.Fatalf("upgrade: %s: %s", d.Summary, d.Detail)
	}
	var sch resource.SchemaResponse
	newSeedResource().Schema(ctx, resource.SchemaRequest{}, &sch)
	if sch.Schema.Version != seedSchemaVersion {
		t.Fatalf("schema version %d, want %d", sch.Schema.Version, seedSchemaVersion)
	}
	raw, err := resp.UpgradedState.Unmarshal(sch.Schema.Type().TerraformType(ctx))
	if err != nil {
		t.Fatalf("the upgraded state does not fit the schema: %v", err)
	}
	var m seedResourceModel
	if d := (tfsdk.State{Schema: sch.Schema, Raw: raw}).Get(ctx, &m); d.HasError() {
		t.Fatalf("reading the upgraded state: %v", d)
	}
	return m
}

func readV0(t *testing.T, name string) ([]byte, map[string]any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var attrs map[string]any
	if err := json.Unmarshal(b, &attrs); err != nil {
		t.Fatal(err)
	}
	return b, attrs
}

// A version 0 state, as the provider before schema version 1 wrote it for
// a seed with a user, a key, a static address and a share (captured from
// a real apply), upgrades to what a plan of the same configuration
// computes now: user_data_sha256 is the digest of the user data the seed
// renders to, the ISO checksum is the stored one (so no upload), and every
// other attribute is carried over.
func TestSeedStateUpgradeFromV0(t *testing.T) {
	t.Parallel()
	raw, old := readV0(t, "seed_state_v0.json")
	m := upgradeSeedState(t, 0, raw)

	stored := sha256.Sum256([]byte(old["rendered_user_data"].(string)))
	if got, want := m.UserDataSHA256.ValueString(), hex.EncodeToString(stored[:]); got != want {
		t.Fatalf("user_data_sha256 = %q, want the digest of the stored document, %q", got, want)
	}

	// The plan renders the seed from the same inputs and, while the
	// renderer is the one that wrote the fixture, must compute the same
	// digest and ISO checksum, or upgrading would plan an update. Once the
	// renderer changes, every existing seed plans an update for that
	// reason alone, which is not the upgrade's doing.
	spec, d := m.spec(&m, "")
	if d.HasError() {
		t.Fatalf("spec from the upgraded state: %v", d)
	}
	res, err := seed.Render(spec)
	if err != nil {
		t.Fatal(err)
	}
	if doc := string(res.Files[userDataFile(res.Format)]); doc == old["rendered_user_data"] {
		if res.ISOSHA256 != old["sha256"] {
			t.Errorf("the ISO renders to %s, the v0 state says %s: the plan would rewrite the seed", res.ISOSHA256, old["sha256"])
		}
		if got := digestIfAny(res.Files[userDataFile(res.Format)]); !m.UserDataSHA256.Equal(got) {
			t.Errorf("user_data_sha256 = %s after the upgrade, the plan computes %s", m.UserDataSHA256, got)
		}
	} else {
		t.Logf("the renderer changed since testdata/seed_state_v0.json was captured: only the upgrade's own mapping is checked")
	}
	for attr, got := range map[string]string{
		"id": m.ID.ValueString(), "name": m.Name.ValueString(), "pool": m.Pool.ValueString(),
		"sha256": m.SHA256.ValueString(), "instance_id": m.InstanceID.ValueString(),
		"volume_key": m.VolumeKey.ValueString(), "volume_path": m.VolumePath.ValueString(),
		"rendered_meta_data": m.RenderedMetaData.ValueString(), "rendered_network_config": m.RenderedNetworkConfig.ValueString(),
	} {
		if got != old[attr] {
			t.Errorf("%s = %q after the upgrade, was %q", attr, got, old[attr])
		}
	}
	if m.User == nil || len(m.User.SSHAuthorizedKeys) != 1 || len(m.SharedFolders) != 1 || len(m.Network) != 1 {
		t.Errorf("nested inputs were not carried over: user %+v, shared_folders %d, network %d", m.User, len(m.SharedFolders), len(m.Network))
	}
	out, err := upgradeSeedStateV0(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) >= len(raw)/3 {
		t.Errorf("the upgraded attributes are %d bytes, the v0 ones %d: want less than a third", len(out), len(raw))
	}
}

// A version 0 seed whose user data held write-only values stored no
// document and user_data_write_only = true; version 1 stores no digest,
// which is also what the plan computes for it.
func TestSeedStateUpgradeFromV0WriteOnly(t *testing.T) {
	t.Parallel()
	raw, old := readV0(t, "seed_state_v0_write_only.json")
	if old["user_data_write_only"] != true || old["rendered_user_data"] != nil {
		t.Fatalf("fixture: want a write-only v0 seed, got user_data_write_only=%v", old["user_data_write_only"])
	}
	m := upgradeSeedState(t, 0, raw)
	if !m.UserDataSHA256.IsNull() {
		t.Errorf("user_data_sha256 = %s, want null for write-only user data", m.UserDataSHA256)
	}
	if m.SHA256.ValueString() != old["sha256"] {
		t.Errorf("sha256 = %s after the upgrade, was %v", m.SHA256, old["sha256"])
	}
	if !m.UserDataWO.IsNull() {
		t.Errorf("user_data_wo must stay null in state, got %s", m.UserDataWO)
	}
}

// Stored states that are not a seed's are refused with a way out, not
// turned into an empty seed.
func TestSeedStateUpgradeRefusesGarbage(t *testing.T) {
	t.Parallel()
	for _, in := range []string{`[]`, `null`, `{"rendered_user_data": 7}`, `{"user_data_write_only": "yes"}`} {
		if _, err := upgradeSeedStateV0([]byte(in)); err == nil {
			t.Errorf("upgradeSeedStateV0(%s): want an error", in)
		}
	}
	// A document of "" (which some earlier versions stored for none) is none.
	out, err := upgradeSeedStateV0([]byte(`{"rendered_user_data": "", "user_data_write_only": false}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != `{"user_data_sha256":null}` {
		t.Errorf(`an empty document upgraded to %s, want {"user_data_sha256":null}`, out)
	}
}
