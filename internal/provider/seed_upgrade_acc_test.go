package provider

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/seed"
)

// seedStateV0Rev is a commit whose kohaku_seed wrote schema version 0 (the
// whole user-data document in state) and whose renderer differs from this
// one's (it started qemu-guest-agent with "systemctl enable --now").
const seedStateV0Rev = "60617384bc0513c78417180a0058790bb373a9e8"

// seedInstance is one kohaku_seed instance of a state file.
type seedInstance struct {
	SchemaVersion int            `json:"schema_version"`
	Attributes    map[string]any `json:"attributes"`
}

func seedInstanceOf(t *testing.T, state []byte) seedInstance {
	t.Helper()
	var doc struct {
		Resources []struct {
			Type      string         `json:"type"`
			Instances []seedInstance `json:"instances"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(state, &doc); err != nil {
		t.Fatal(err)
	}
	for _, r := range doc.Resources {
		if r.Type == "kohaku_seed" && len(r.Instances) == 1 {
			return r.Instances[0]
		}
	}
	t.Fatalf("no kohaku_seed in the state:\n%s", state)
	return seedInstance{}
}

// State that the provider wrote before schema version 1 (built from
// seedStateV0Rev, driven through the terraform CLI) is upgraded by this
// one without touching the seed: the plan is empty, the volume on the host
// is the same bytes, the stored state keeps the user data's digest instead
// of the document, and a refresh after the upgrade still sees the seed
// as it is. That revision renders the same inputs to another ISO: the plan
// keeps the seed the host has (it is what the inputs made, and rewriting it
// would give the guest a new instance id) rather than rewrite it because
// the renderer changed.
func TestAccSeed_upgradeFromV0(t *testing.T) {
	acctest.NeedTerraform(t)
	pool := acctest.Env(t, "KOHAKU_TEST_POOL")
	name := "kohaku-acc-seed-upgrade.iso"
	w := acctest.NewWorkspaceWith(t, faultCLIHead+seedConfig(pool, name, ""), acctest.BuildRevision(t, seedStateV0Rev))
	t.Cleanup(func() {
		if out, err := w.Run("destroy", "-auto-approve", "-input=false"); err != nil {
			t.Errorf("destroy: %v\n%s", err, out)
		}
	})
	w.Must("apply", "-auto-approve", "-input=false")
	before := w.StateFile()
	v0 := seedInstanceOf(t, before)
	doc, _ := v0.Attributes["rendered_user_data"].(string)
	if v0.SchemaVersion != 0 || doc == "" {
		t.Fatalf("the provider at %s wrote schema version %d with rendered_user_data %q: want version 0 with the document",
			seedStateV0Rev, v0.SchemaVersion, doc)
	}
	iso := downloadWithVirsh(t, pool, name)

	w.Serve(acctest.CLIConfig(t))
	if out, err := w.Run("plan", "-detailed-exitcode", "-input=false"); err != nil {
		t.Fatalf("the first plan with the new provider on version 0 state is not empty (%v):\n%s", err, out)
	}
	w.Must("apply", "-refresh-only", "-auto-approve", "-input=false")
	after := w.StateFile()
	v1 := seedInstanceOf(t, after)
	if v1.SchemaVersion != seedSchemaVersion {
		t.Errorf("schema version %d after the upgrade, want %d", v1.SchemaVersion, seedSchemaVersion)
	}
	for _, gone := range []string{"rendered_user_data", "user_data_write_only"} {
		if _, ok := v1.Attributes[gone]; ok {
			t.Errorf("%s is still in the upgraded state", gone)
		}
	}
	in, err := seed.Inspect(downloadWithVirsh(t, pool, name))
	if err != nil {
		t.Fatal(err)
	}
	onHost := sha256.Sum256(in.Files[seed.FileUserData])
	stored := sha256.Sum256([]byte(doc))
	if got := v1.Attributes["user_data_sha256"]; got != hex.EncodeToString(onHost[:]) || onHost != stored {
		t.Errorf("user_data_sha256 = %v; the user data on the host has %x, the version 0 document %x", got, onHost, stored)
	}
	if !bytes.Equal(downloadWithVirsh(t, pool, name), iso) {
		t.Errorf("the seed volume changed during the upgrade")
	}
	if v1.Attributes["sha256"] != v0.Attributes["sha256"] || v1.Attributes["id"] != v0.Attributes["id"] {
		t.Errorf("sha256 or id changed: %v %v -> %v %v", v0.Attributes["sha256"], v0.Attributes["id"], v1.Attributes["sha256"], v1.Attributes["id"])
	}
	t.Logf("state file: %d bytes at version 0, %d after the upgrade", len(before), len(after))
	if len(after) > len(before)/2 {
		t.Errorf("state file %d bytes after the upgrade, %d before: want at most half", len(after), len(before))
	}
	if out, err := w.Run("plan", "-detailed-exitcode", "-input=false"); err != nil {
		t.Fatalf("the plan after the upgrade is not empty (%v):\n%s", err, out)
	}
	// A refresh after the upgrade still reads the volume: a change out of
	// band is an update that uploads the right content again.
	tampered := append([]byte(nil), iso...)
	copy(tampered[len(tampered)-4096:], "XXXXXXXXXXXXXXXX")
	f := t.TempDir() + "/tampered.iso"
	if err := os.WriteFile(f, tampered, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := virsh(t, "vol-upload", "--pool", pool, name, f); err != nil {
		t.Fatalf("virsh vol-upload: %v\n%s", err, out)
	}
	out, err := w.Run("plan", "-detailed-exitcode", "-input=false")
	if err == nil || !bytes.Contains([]byte(out), []byte("kohaku_seed.test will be updated in-place")) {
		t.Fatalf("a seed changed out of band after the upgrade: want an in-place update, got (%v):\n%s", err, out)
	}
}
